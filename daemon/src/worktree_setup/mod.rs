//! Making a new worktree ready before the agent runs: files copied or symlinked from the
//! main checkout (`[worktree] copy/symlink` of `.grove.toml`, and `.worktreeinclude`),
//! then setup commands, their output logged to the agent's log. Placed paths are
//! returned so that salvage never commits them.
//!
//! The checkout may hold an agent's commits (a child's base is its parent's HEAD), so
//! placement never follows a link in the worktree (place.rs), setup commands run only
//! when the user approved the file (trust.rs), and for a jailed agent (or on agents'
//! content) they run in a jail of the agent's kind, a view of their own included, with
//! its environment.

pub mod place;
pub mod trust;

use crate::error::Error;
use grove_proto::shim::{JailSpec, SHIM_ARG};
use grove_proto::shim::{SetupOutcome, SetupSpec, SETUP_ARG};
use grove_proto::types::WorktreeSetup;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// The tables a `.grove.toml` may hold.
pub const KNOWN_TABLES: &[&str] = &["agents", "state", "worktree"];

/// Reads `[worktree]` from the text of a `.grove.toml`. A table grove does not know is
/// refused: a misspelled `[worktre]` would otherwise be ignored without a word.
pub fn parse(text: &str, origin: &str) -> Result<WorktreeSetup, Error> {
    if let Ok(toml::Value::Table(top)) = toml::from_str::<toml::Value>(text) {
        if let Some(unknown) = top.keys().find(|k| !KNOWN_TABLES.contains(&k.as_str())) {
            return Err(Error::BadInput(format!(
                "{origin}: unknown table or key `{unknown}`; a .grove.toml holds only the \
                 tables {}: fix the name or remove it",
                KNOWN_TABLES
                    .iter()
                    .map(|t| format!("[{t}]"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
    }
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        worktree: WorktreeSetup,
    }
    let file: File = toml::from_str::<toml::Value>(text)
        .and_then(|value| {
            // Other tables ([state], ...) are not ours to check.
            let worktree = value.get("worktree").cloned();
            let mut table = toml::Table::new();
            if let Some(worktree) = worktree {
                table.insert("worktree".into(), worktree);
            }
            toml::Value::Table(table).try_into()
        })
        .map_err(|e| Error::BadInput(format!("{origin}: [worktree]: {e}")))?;
    for path in file.worktree.copy.iter().chain(&file.worktree.symlink) {
        check_relative(path, origin)?;
    }
    Ok(file.worktree)
}

fn check_relative(path: &str, origin: &str) -> Result<(), Error> {
    let p = Path::new(path);
    let escapes = p.is_absolute()
        || p.components().any(|c| matches!(c, Component::ParentDir))
        || !p.components().any(|c| matches!(c, Component::Normal(_)))
        || path.contains('\0');
    if escapes {
        return Err(Error::BadInput(format!(
            "{origin}: [worktree] path `{path}` must name a file or directory inside the repository, relative to its root"
        )));
    }
    Ok(())
}

/// How setup commands run: as the agent will, in a jail of its kind (when it has one,
/// or when the worktree holds agents' content) and with its environment, never the
/// daemon's.
pub struct Runner {
    pub jail: Option<SetupJail>,
    pub env: Vec<(String, String)>,
}

/// A jail for setup commands: a jailed agent's (a view of its own and Landlock), run
/// by the shim's setup helper, since only a single-threaded process can start a
/// command in new namespaces (`grove-shim __shim setup`).
pub struct SetupJail {
    /// Its writable paths and its view.
    pub spec: JailSpec,
    /// Why the commands run jailed, for the log and a refusal: "of a jailed agent".
    pub jailed_for: String,
    /// The shim program, run as `__shim setup`.
    pub helper: PathBuf,
    /// What a command leaves running gets this long after SIGTERM.
    pub grace: Duration,
}

/// Copies, links and runs setup; returns the paths placed. On failure the caller rolls
/// the worktree back.
pub fn apply(
    setup: &WorktreeSetup,
    main: &Path,
    worktree: &Path,
    log: &Path,
    runner: &Runner,
) -> Result<Vec<String>, Error> {
    let mut log_file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io("open", log))?;
    if let Some(jail) = runner.jail.as_ref().filter(|_| !setup.setup.is_empty()) {
        let _ = writeln!(
            log_file,
            "grove: setup: commands {} run jailed (in a view of their own: they see none \
             of your secrets or processes, write only the worktree and open no Unix socket)",
            jail.jailed_for
        );
    }
    let roots = place::Roots::open(main, worktree)?;
    let mut placed = Vec::new();
    let mut copies = setup.copy.clone();
    copies.extend(worktree_include(main)?);
    for path in copies {
        if !roots.copy(&path)? {
            let _ = writeln!(
                log_file,
                "grove: setup: {path} is not in the main checkout; not copied"
            );
            continue;
        }
        placed.push(path);
    }
    for path in &setup.symlink {
        roots.link(main, path)?;
        placed.push(path.clone());
    }
    for command in &setup.setup {
        run_setup_command(command, worktree, runner, &mut log_file, log)?;
    }
    Ok(placed)
}

/// Runs `command` as the daemon's child (content of the user's own), `out` its output.
fn run_plain(
    command: &str,
    worktree: &Path,
    env: &[(String, String)],
    out: fs::File,
) -> Result<ExitStatus, Error> {
    let cannot = |source: std::io::Error| Error::SetupCommand {
        command: command.to_string(),
        source,
    };
    let err = out.try_clone().map_err(cannot)?;
    Command::new("sh")
        .args(["-c", command])
        .current_dir(worktree)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(cannot)
}

/// Runs `command` through the setup helper, in `jail`, with `out` as its output.
fn run_jailed(
    command: &str,
    worktree: &Path,
    env: &[(String, String)],
    jail: &SetupJail,
    out: fs::File,
) -> Result<ExitStatus, Error> {
    let spec = SetupSpec {
        argv: ["sh", "-c", command].map(String::from).to_vec(),
        env: env.to_vec(),
        jail: jail.spec.clone(),
        grace_ms: jail.grace.as_millis() as u64,
    };
    let cannot = |source: std::io::Error| Error::SetupCommand {
        command: command.to_string(),
        source,
    };
    let mut helper = Command::new(&jail.helper)
        .args([SHIM_ARG, SETUP_ARG])
        .current_dir(worktree)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(out)
        .spawn()
        .map_err(cannot)?;
    let sent = serde_json::to_vec(&spec)
        .map_err(std::io::Error::other)
        .and_then(|json| helper.stdin.take().expect("piped").write_all(&json));
    let mut answer = Vec::new();
    let read = helper
        .stdout
        .take()
        .expect("piped")
        .read_to_end(&mut answer);
    let status = helper.wait().map_err(cannot)?;
    sent.and(read).map_err(cannot)?;
    let refuse = |why: String| {
        Error::Refused(format!(
            "setup commands {} run in a jail, and {why}; nothing was left behind",
            jail.jailed_for
        ))
    };
    match serde_json::from_slice::<SetupOutcome>(&answer) {
        Ok(SetupOutcome::Exited(code)) => Ok(ExitStatus::from_raw((code & 0xff) << 8)),
        Ok(SetupOutcome::Signaled(signal)) => Ok(ExitStatus::from_raw(signal & 0x7f)),
        Ok(SetupOutcome::NotRun(why)) => Err(refuse(why)),
        Err(_) => Err(refuse(format!(
            "grove's setup helper {} ended ({status}) without saying how `{command}` did",
            jail.helper.display()
        ))),
    }
}

fn io_err(what: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Setup {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Untracked files matching `.worktreeinclude` (gitignore syntax) in the main checkout.
fn worktree_include(main: &Path) -> Result<Vec<String>, Error> {
    let include = main.join(".worktreeinclude");
    if !include.exists() {
        return Ok(Vec::new());
    }
    // `git ls-files -o -i --exclude-from` lists exactly the untracked files the patterns
    // match, with git's own gitignore semantics (hardened: no fsmonitor hook).
    let output = crate::git::hardened_git()
        .arg("-C")
        .arg(main)
        .args(["ls-files", "-z", "--others", "--ignored", "--exclude-from"])
        .arg(&include)
        .output()
        .map_err(|e| Error::Git(format!("cannot run git ls-files: {e}")))?;
    if !output.status.success() {
        return Err(Error::BadInput(format!(
            "{}: {}",
            include.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

fn run_setup_command(
    command: &str,
    worktree: &Path,
    runner: &Runner,
    log_file: &mut fs::File,
    log: &Path,
) -> Result<(), Error> {
    let _ = writeln!(log_file, "grove: setup: $ {command}");
    let out = log_file
        .try_clone()
        .map_err(|e| io_err("opening", log, e))?;
    let status = match &runner.jail {
        Some(jail) => run_jailed(command, worktree, &runner.env, jail, out)?,
        None => run_plain(command, worktree, &runner.env, out)?,
    };
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(Error::BadInput(format!(
        "setup command `{command}` failed ({status}); nothing was left behind. Its output:\n{}",
        tail.join("\n")
    )))
}

#[cfg(test)]
mod helper_answers {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Runs `sh ./setup.sh`-like `command` through a stand-in helper that answers
    /// `answer` (after printing to the log); the result and the log.
    fn through(answer: &str) -> (Result<Vec<String>, Error>, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (main, worktree) = (dir.path().join("main"), dir.path().join("wt"));
        fs::create_dir_all(&main).expect("mkdir");
        fs::create_dir_all(&worktree).expect("mkdir");
        let helper = dir.path().join("helper");
        fs::write(
            &helper,
            format!(
                "#!/bin/sh\ncat > /dev/null\necho from-the-command >&2\nprintf '%s' '{answer}'\n"
            ),
        )
        .expect("write");
        fs::set_permissions(&helper, fs::Permissions::from_mode(0o755)).expect("chmod");
        let runner = Runner {
            jail: Some(SetupJail {
                spec: JailSpec::default(),
                jailed_for: "of a jailed agent".into(),
                helper,
                grace: Duration::from_millis(10),
            }),
            env: Vec::new(),
        };
        let setup = WorktreeSetup {
            setup: vec!["make deps".into()],
            ..WorktreeSetup::default()
        };
        let log = dir.path().join("log");
        let result = apply(&setup, &main, &worktree, &log, &runner);
        (result, fs::read_to_string(&log).unwrap_or_default())
    }

    #[test]
    fn an_exit_status_is_the_commands_and_its_output_is_logged() {
        let (result, log) = through(r#"{"exited":3}"#);
        let err = result.expect_err("failed").to_string();
        assert!(err.contains("`make deps` failed (exit status: 3)"), "{err}");
        assert!(err.contains("from-the-command"), "{err}");
        assert!(log.contains("run jailed"), "{log}");
        assert!(through(r#"{"exited":0}"#).0.is_ok());
        let (signaled, _) = through(r#"{"signaled":9}"#);
        assert!(signaled
            .expect_err("killed")
            .to_string()
            .contains("signal: 9"));
    }

    #[test]
    fn a_jail_the_helper_could_not_have_is_a_refusal_with_its_reason() {
        let (result, _) = through(r#"{"not_run":"no view here"}"#);
        let err = result.expect_err("refused");
        assert!(matches!(err, Error::Refused(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("setup commands of a jailed agent run in a jail"),
            "{text}"
        );
        assert!(text.contains("no view here"), "{text}");
        let (garbled, _) = through("garbled");
        assert!(garbled
            .expect_err("refused")
            .to_string()
            .contains("without saying how `make deps` did"));
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn any_grove_toml_parses_or_fails_naming_the_file(text in "\\PC{0,300}") {
            if let Err(e) = super::parse(&text, "fuzz.toml") {
                prop_assert!(e.to_string().starts_with("fuzz.toml"), "{}", e);
            }
        }

        #[test]
        fn worktree_paths_never_escape(path in "[./a-z]{0,12}") {
            let text = format!("[worktree]\ncopy = [\"{path}\"]\n");
            if let Ok(setup) = super::parse(&text, "fuzz.toml") {
                for p in setup.copy {
                    prop_assert!(!p.is_empty() && !p.starts_with('/') && !p.split('/').any(|c| c == ".."));
                }
            }
        }
    }
}

//! Making a new worktree ready before the agent runs: files copied or symlinked from the
//! main checkout (`[worktree] copy/symlink` of `.grove.toml`, and `.worktreeinclude`),
//! then setup commands, their output logged to the agent's log. Placed paths are
//! returned so that salvage never commits them.
//!
//! The checkout may hold an agent's commits (a child's base is its parent's HEAD), so
//! placement never follows a link in the worktree (place.rs), setup commands run only
//! when the user approved the file (trust.rs), and for a jailed agent they run in its
//! jail with its environment.

pub mod place;
pub mod trust;

use crate::error::Error;
use grove_agent_shim::jail::Jail;
use grove_agent_shim::JailSpec;
use grove_proto::types::WorktreeSetup;
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path};
use std::process::{Command, Stdio};
use std::sync::Arc;

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

/// How setup commands run: as the agent will, in its jail (when it has one, or when
/// the worktree holds agents' content) and with its environment, never the daemon's.
pub struct Runner {
    pub jail: Option<JailSpec>,
    /// Why the commands run jailed, for the log and a refusal: "of a jailed agent".
    pub jailed_for: String,
    pub env: Vec<(String, String)>,
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
    // Built first: a jail that cannot be built means no setup at all, never an
    // unjailed one.
    let jail = match (&runner.jail, setup.setup.is_empty()) {
        (Some(spec), false) => Some(Arc::new(setup_jail(spec, &runner.jailed_for)?)),
        _ => None,
    };
    let mut log_file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io("open", log))?;
    if jail.is_some() {
        let _ = writeln!(
            log_file,
            "grove: setup: commands {} run jailed (they write only the worktree and \
             open no Unix socket)",
            runner.jailed_for
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
        run_setup_command(command, worktree, runner, jail.clone(), &mut log_file, log)?;
    }
    Ok(placed)
}

/// The agent's Landlock jail, plus no way to reach the daemon: see grove_sys::no_sockets.
struct SetupJail {
    landlock: Jail,
    no_sockets: grove_sys::no_sockets::NoSockets,
}

impl SetupJail {
    fn enter(&self) -> std::io::Result<()> {
        self.landlock.enter()?;
        self.no_sockets.install()
    }
}

fn setup_jail(spec: &JailSpec, jailed_for: &str) -> Result<SetupJail, Error> {
    let refuse = |why: String| {
        Error::Refused(format!(
            "setup commands {jailed_for} run in a jail, and {why}; nothing was run"
        ))
    };
    let landlock = Jail::build(spec).map_err(refuse)?;
    let no_sockets = grove_sys::no_sockets::NoSockets::new().ok_or_else(|| {
        refuse(format!(
            "grove cannot keep them from the daemon's socket on {} ({})",
            std::env::consts::ARCH,
            grove_sys::OS
        ))
    })?;
    Ok(SetupJail {
        landlock,
        no_sockets,
    })
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
    jail: Option<Arc<SetupJail>>,
    log_file: &mut fs::File,
    log: &Path,
) -> Result<(), Error> {
    let _ = writeln!(log_file, "grove: setup: $ {command}");
    let out = log_file
        .try_clone()
        .map_err(|e| io_err("opening", log, e))?;
    let err = log_file
        .try_clone()
        .map_err(|e| io_err("opening", log, e))?;
    let mut child = Command::new("sh");
    child
        .args(["-c", command])
        .current_dir(worktree)
        .env_clear()
        .envs(runner.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if let Some(jail) = jail {
        // SAFETY: SetupJail::enter is async-signal-safe (prctl and one syscall on an
        // fd and a program the Arc keeps alive), as pre_exec requires.
        unsafe {
            child.pre_exec(move || jail.enter());
        }
    }
    let status = child.status().map_err(|source| Error::SetupCommand {
        command: command.to_string(),
        source,
    })?;
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

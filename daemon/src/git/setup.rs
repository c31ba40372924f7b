//! Making a new worktree ready before the agent runs: files copied or symlinked from the
//! main checkout (`[worktree] copy/symlink` of `.grove.toml`, and `.worktreeinclude`),
//! then setup commands, their output logged to the agent's log. Placed paths are
//! returned so that salvage never commits them.

use super::git_command;
use crate::error::Error;
use grove_proto::types::WorktreeSetup;
use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Component, Path};
use std::process::{Command, Stdio};

/// Reads `[worktree]` from the text of a `.grove.toml`.
pub fn parse(text: &str, origin: &str) -> Result<WorktreeSetup, Error> {
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
        || path.is_empty();
    if escapes {
        return Err(Error::BadInput(format!(
            "{origin}: [worktree] path `{path}` must be relative to the repository root and stay inside it"
        )));
    }
    Ok(())
}

/// Copies, links and runs setup; returns the paths placed. On failure the caller rolls
/// the worktree back.
pub fn apply(
    setup: &WorktreeSetup,
    main: &Path,
    worktree: &Path,
    log: &Path,
) -> Result<Vec<String>, Error> {
    let mut placed = Vec::new();
    let mut log_file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::Internal(format!("cannot open {}: {e}", log.display())))?;
    let mut copies = setup.copy.clone();
    copies.extend(worktree_include(main)?);
    for path in copies {
        let from = main.join(&path);
        if !from.exists() {
            let _ = writeln!(
                log_file,
                "grove: setup: {path} is not in the main checkout; not copied"
            );
            continue;
        }
        copy_path(&from, &worktree.join(&path))?;
        placed.push(path);
    }
    for path in &setup.symlink {
        let (from, to) = (main.join(path), worktree.join(path));
        if to.symlink_metadata().is_ok() {
            return Err(Error::BadInput(format!(
                "[worktree] symlink `{path}`: the worktree already has it (is it tracked?)"
            )));
        }
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("creating", parent, e))?;
        }
        symlink(&from, &to).map_err(|e| io_err("linking", &to, e))?;
        placed.push(path.clone());
    }
    for command in &setup.setup {
        run_setup_command(command, worktree, &mut log_file, log)?;
    }
    Ok(placed)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Internal(format!("setup: {what} {}: {e}", path.display()))
}

/// Untracked files matching `.worktreeinclude` (gitignore syntax) in the main checkout.
fn worktree_include(main: &Path) -> Result<Vec<String>, Error> {
    let include = main.join(".worktreeinclude");
    if !include.exists() {
        return Ok(Vec::new());
    }
    // `git ls-files -o -i --exclude-from` lists exactly the untracked files the patterns
    // match, with git's own gitignore semantics.
    let output = git_command()
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

fn copy_path(from: &Path, to: &Path) -> Result<(), Error> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| io_err("creating", parent, e))?;
    }
    let meta = from
        .symlink_metadata()
        .map_err(|e| io_err("reading", from, e))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(|e| io_err("reading", from, e))?;
        return symlink(target, to).map_err(|e| io_err("linking", to, e));
    }
    if meta.is_dir() {
        fs::create_dir_all(to).map_err(|e| io_err("creating", to, e))?;
        for entry in fs::read_dir(from).map_err(|e| io_err("reading", from, e))? {
            let entry = entry.map_err(|e| io_err("reading", from, e))?;
            copy_path(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| io_err("copying", from, e))
}

fn run_setup_command(
    command: &str,
    worktree: &Path,
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
    let status = Command::new("sh")
        .args(["-c", command])
        .current_dir(worktree)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| Error::Internal(format!("cannot run setup command `{command}`: {e}")))?;
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

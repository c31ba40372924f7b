//! A jailed agent's private home: a directory of its own, shown at `$HOME` in its view
//! (`jail_view.rs`), into which the daemon copies what its preset's CLI keeps in the
//! user's home (`jail_home`: `~/.claude`, `~/.codex`, ...).
//!
//! Copied, never bound: the CLI finds its settings and login and may write its state,
//! but nothing the agent writes (a planted `~/.bashrc` hook, an edited
//! `~/.claude/settings.json`) reaches the user's files. The copy never follows a
//! symbolic link (a link is copied as a link, which in the view points at what the
//! view shows, if anything), and never takes a secret of [`HOME_SECRETS`], whatever
//! the entry.
//!
//! The source is the daemon's own `$HOME` (the user's), not the one in the agent's
//! environment: a jailed agent chooses its child's environment, and must not point
//! the copy at another directory of the user's.

use crate::presets::{check_home_entry, HOME_SECRETS};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The private home of the agent whose TMPDIR is `tmp_dir`: removed with it.
pub fn path(tmp_dir: &Path) -> PathBuf {
    tmp_dir.join("home")
}

/// The user's home: the daemon's `$HOME`.
pub fn user_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h != Path::new("/"))
}

/// Makes `private` afresh (a crashed attempt may have left one) and copies `entries`
/// of `home` into it. An entry that does not exist is skipped, as is one reached
/// through a symbolic link of `home`.
pub fn make(private: &Path, home: Option<&Path>, entries: &[String]) -> io::Result<()> {
    match fs::remove_dir_all(private) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(private)?;
    let Some(home) = home else {
        return Ok(());
    };
    for entry in entries {
        // Checked when the agent was spawned; checked again since this copies.
        if check_home_entry(entry).is_err() {
            continue;
        }
        let relative: PathBuf = Path::new(entry)
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        if !real_parents(home, &relative) {
            continue;
        }
        let target = private.join(&relative);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        copy(&home.join(&relative), &target, &relative)?;
    }
    Ok(())
}

/// Whether every directory between `home` and `relative`'s last part is a directory
/// and no link: a link there would take the copy out of `$HOME`.
fn real_parents(home: &Path, relative: &Path) -> bool {
    let mut at = home.to_path_buf();
    let parts: Vec<_> = relative.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match at.symlink_metadata() {
            Ok(meta) if meta.is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// Copies `source` to `target` without following links; `relative` is its path below
/// `$HOME`, to leave out secrets inside a copied directory. Sockets, pipes and devices
/// are left out: a copy of a socket would connect nowhere.
fn copy(source: &Path, target: &Path, relative: &Path) -> io::Result<()> {
    if HOME_SECRETS.iter().any(|s| relative.starts_with(s)) {
        return Ok(());
    }
    let meta = match source.symlink_metadata() {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(fs::read_link(source)?, target)
    } else if kind.is_dir() {
        fs::create_dir(target)?;
        for child in fs::read_dir(source)? {
            let name = child?.file_name();
            copy(
                &source.join(&name),
                &target.join(&name),
                &relative.join(&name),
            )?;
        }
        fs::set_permissions(target, fs::Permissions::from_mode(dir_mode(&meta)))
    } else if kind.is_file() {
        fs::copy(source, target).map(drop)
    } else {
        Ok(())
    }
}

/// A copied directory's mode: the user keeps the right to remove it with the TMPDIR.
fn dir_mode(meta: &fs::Metadata) -> u32 {
    (meta.permissions().mode() & 0o7777) | 0o700
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_what_is_named_links_as_links_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        fs::create_dir_all(home.join(".claude/sub")).expect("mkdir");
        fs::write(home.join(".claude/sub/settings.json"), "{}").expect("write");
        fs::write(home.join(".claude.json"), "{}").expect("write");
        fs::write(home.join(".bashrc"), "rc").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", home.join(".claude/link")).expect("link");
        fs::create_dir_all(dir.path().join("elsewhere/x")).expect("mkdir");
        fs::write(dir.path().join("elsewhere/x/secret"), "s").expect("write");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), home.join(".via")).expect("link");
        let private = dir.path().join("tmp/home");
        let entries: Vec<String> = [".claude", ".claude.json", ".missing", ".via/x", "../x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        make(&private, Some(&home), &entries).expect("make");
        assert_eq!(
            fs::read_to_string(private.join(".claude/sub/settings.json")).expect("copied"),
            "{}"
        );
        assert!(private.join(".claude.json").is_file());
        assert_eq!(
            fs::read_link(private.join(".claude/link")).expect("a link"),
            Path::new("/etc/passwd")
        );
        assert!(!private.join(".bashrc").exists(), "not named");
        assert!(!private.join(".via").exists(), "reached through a link");
        assert!(!dir.path().join("tmp/x").exists());
        // Afresh each time.
        make(&private, Some(&home), &[]).expect("again");
        assert!(!private.join(".claude").exists());
    }
}

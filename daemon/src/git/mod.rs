//! Everything grove does to git repositories. git2 for bookkeeping (refs, locks,
//! salvage commits, stats); the `git` CLI only for checkout, where it is much faster
//! (parallel checkout workers) and runs the user's filters and hooks.

pub mod collect;
pub mod lane;
pub mod pool;
pub mod refs;
pub mod salvage;
pub mod setup;
pub mod target;
pub mod worktree;

use std::process::Command;

/// A `git` command that ignores the daemon's own GIT_* environment, so that a daemon
/// started from inside a git hook or a worktree never acts on the wrong repository.
pub fn git_command() -> Command {
    let mut command = Command::new("git");
    for var in grove_proto::env::GIT_LOCATION_VARS {
        command.env_remove(var);
    }
    command.env_remove("GIT_CEILING_DIRECTORIES");
    command.stdin(std::process::Stdio::null());
    command
}

/// Runs `git -C path -c checkout.workers=<workers> ARGS` (a checkout step in a worktree);
/// a failure carries git's own message.
pub fn run_checkout(
    path: &std::path::Path,
    workers: usize,
    args: &[&str],
) -> Result<(), crate::error::Error> {
    let output = git_command()
        .arg("-C")
        .arg(path)
        .arg("-c")
        .arg(format!("checkout.workers={workers}"))
        .args(args)
        .output()
        .map_err(|e| crate::error::Error::Git(format!("cannot run git: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(crate::error::Error::Git(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

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

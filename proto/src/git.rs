//! What the `grove` command and the daemon share about running git: one command
//! builder and the names of grove's refs.

use std::process::{Command, Stdio};

/// Where grove keeps the work of worktrees no agent owns, and tips of discarded branches.
pub const SALVAGE_PREFIX: &str = "refs/grove/salvage/";

/// Where `grove discard` keeps the tip of agent `id`'s branch (the prune pass expires it).
pub fn discarded_ref(id: &str) -> String {
    format!("{SALVAGE_PREFIX}discarded-{id}")
}

/// A `git` command that ignores the caller's git location variables (`GIT_DIR`,
/// `GIT_INDEX_FILE`, ...): a `grove` run from inside a git hook, or a daemon started
/// there, must act on the repository it names, never on the hook's repository or index.
/// Nobody is there to answer a prompt: stdin is empty and git does not ask for one.
pub fn command() -> Command {
    let mut command = Command::new("git");
    for var in crate::env::GIT_LOCATION_VARS {
        command.env_remove(var);
    }
    command
        .env_remove("GIT_CEILING_DIRECTORIES")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    command
}

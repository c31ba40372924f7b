//! Environment variables with a meaning to grove, shared by everything that starts
//! grove or git processes.

/// Variables that say whose a process is: which agent's (set by the shim), or which
/// daemon's git ([`DAEMON_GIT_VAR`]). Anything that starts grove processes from an
/// environment that may be an agent's (a daemon, a test, a benchmark) drops them, so
/// that one agent's identity never passes to another.
pub const AGENT_IDENTITY_VARS: &[&str] = &[
    "GROVE_AGENT_ID",
    "GROVE_SESSION",
    "GROVE_SOCKET",
    "GROVE_TOKEN",
    "GROVE_WORKTREE",
    "GROVE_BASE",
    "GROVE_NOTIFY_READY",
    DAEMON_GIT_VAR,
];

/// Marks every git the daemon runs (and, inherited, git's own helpers) with the
/// daemon's state directory, so that the next daemon finds and kills what a crashed one
/// left running before it touches the same worktrees.
pub const DAEMON_GIT_VAR: &str = "GROVE_DAEMON_GIT";

/// Git variables that point git at a particular repository (set inside git hooks, for
/// instance): git run by grove, or by an agent in its worktree, must not inherit them.
pub const GIT_LOCATION_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

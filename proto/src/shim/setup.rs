//! What the daemon asks of `__shim setup` (one jailed setup command) and what it answers.

use super::JailSpec;
use serde::{Deserialize, Serialize};

/// The argument after `__shim` that makes the shim this helper.
pub const SETUP_ARG: &str = "setup";

/// One setup command, run in the helper's current directory (the worktree).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetupSpec {
    pub argv: Vec<String>,
    /// The complete environment of the command.
    pub env: Vec<(String, String)>,
    /// Its jail, with the view it runs in (a spec without one is refused).
    pub jail: JailSpec,
    /// What is left running once the command ends gets SIGTERM, then this long.
    pub grace_ms: u64,
}

/// How a setup command ended, or why it never ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SetupOutcome {
    Exited(i32),
    Signaled(i32),
    /// The jail or the view could not be had, or the command could not start.
    NotRun(String),
}

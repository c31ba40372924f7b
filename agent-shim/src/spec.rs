use grove_proto::types::Limits;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Everything the shim needs to run one agent, sent by the daemon on the shim's stdin
/// (never in a file or argv, because the environment may hold secrets).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShimSpec {
    pub agent_id: String,
    pub argv: Vec<String>,
    /// The complete environment of the command (the shim clears its own first).
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    pub timeout_ms: Option<u64>,
    /// Time between SIGTERM and SIGKILL when the tree is stopped.
    pub grace_ms: u64,
    /// Where the exit record goes (written as `<path>.tmp`, then renamed).
    pub exit_record: PathBuf,
    /// The daemon's lock file (it holds the daemon's pid): a daemon that ends up below
    /// this shim is spared.
    #[serde(default)]
    pub daemon_lock: Option<PathBuf>,
}

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
    /// Created (exclusively) before the command starts, holding the shim's pid and start
    /// time: a daemon that crashed while this start was under way finds it and adopts
    /// the agent instead of starting it twice.
    #[serde(default)]
    pub claim: Option<PathBuf>,
    /// If this exists when the claim is made, a restarted daemon has already given this
    /// start up (and will start the agent again): the shim runs nothing.
    #[serde(default)]
    pub abandon: Option<PathBuf>,
}

//! Every method: its name, its params and its result, in one place.

use crate::types::{AgentRecord, Limits, Removal, SalvageRef};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A method of the protocol, tying its name to its typed params and result.
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

macro_rules! method {
    ($ty:ident, $name:literal, $params:ty, $result:ty) => {
        pub struct $ty;
        impl Method for $ty {
            const NAME: &'static str = $name;
            type Params = $params;
            type Result = $result;
        }
    };
}

method!(Hello, "hello", HelloParams, HelloResult);
method!(Spawn, "agent.spawn", SpawnParams, AgentRecord);
method!(List, "agent.list", ListParams, AgentList);
method!(Get, "agent.get", IdParams, AgentRecord);
method!(Wait, "agent.wait", WaitParams, AgentList);
method!(Kill, "agent.kill", IdParams, AgentRecord);
method!(Queue, "agent.queue", Empty, AgentList);
method!(Remove, "agent.remove", IdParams, AgentRecord);
method!(Gc, "janitor.gc", GcParams, GcReport);
method!(GcLog, "janitor.log", GcLogParams, GcLogResult);
method!(Salvaged, "salvage.list", Empty, SalvagedResult);
method!(Restore, "salvage.restore", RestoreParams, RestoreResult);
method!(DaemonStatus, "daemon.status", Empty, DaemonStatusResult);
method!(DaemonStop, "daemon.stop", Empty, Empty);

/// Every method name the daemon serves.
pub const ALL_METHODS: &[&str] = &[
    Hello::NAME,
    Spawn::NAME,
    List::NAME,
    Get::NAME,
    Wait::NAME,
    Kill::NAME,
    Queue::NAME,
    Remove::NAME,
    Gc::NAME,
    GcLog::NAME,
    Salvaged::NAME,
    Restore::NAME,
    DaemonStatus::NAME,
    DaemonStop::NAME,
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    pub protocol: u32,
    #[serde(default)]
    pub client: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HelloResult {
    pub protocol: u32,
    pub daemon_version: String,
    pub pid: u32,
}

/// One variable for the agent's environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SpawnParams {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// A path inside the repository (the client's working directory, or `--repo`).
    pub repo: PathBuf,
    #[serde(default)]
    pub name: Option<String>,
    /// Branch, tag or commit to start from; default: the repository's HEAD.
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub limits: Limits,
    /// Keep the worktree after collection.
    #[serde(default)]
    pub keep: bool,
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Include finished agents (collected, lost, cancelled).
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentList {
    pub agents: Vec<AgentRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdParams {
    /// A full agent id or any unique prefix of one.
    pub id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DaemonStatusResult {
    pub pid: u32,
    pub daemon_version: String,
    pub protocol: u32,
    pub started_at_ms: u64,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub worktree_root: PathBuf,
    pub agents_live: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GcParams {
    /// Say what would be removed without removing anything.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GcReport {
    pub dry_run: bool,
    pub removals: Vec<Removal>,
    /// Ids of finished agents whose records and logs passed `retention` and were deleted.
    pub records_deleted: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GcLogParams {
    /// Most recent entries to return (default 100).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GcLogResult {
    pub removals: Vec<Removal>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SalvagedResult {
    pub refs: Vec<SalvageRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    /// A path inside the repository that holds the ref.
    pub repo: PathBuf,
    /// `refs/grove/salvage/<name>` or just `<name>`.
    pub reference: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RestoreResult {
    pub branch: String,
    pub worktree: PathBuf,
}

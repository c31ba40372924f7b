//! Wire types of sessions and their shared state.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One write of a batch: a delta for `channel` (see docs/state-semantics.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StateWrite {
    pub channel: String,
    pub value: Value,
    /// The checkpoint the writer last read; an `overwrite` write to a channel another
    /// writer changed after it is refused as a conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
}

/// A schema as text, for the daemon to parse (so that errors name the file and line).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SchemaText {
    /// File name used in error messages.
    pub origin: String,
    /// TOML holding a `[state]` table.
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub id: u64,
    /// The checkpoint this one follows; for a fork's first checkpoint, the checkpoint
    /// of `parent_session` it was forked from.
    pub parent: Option<u64>,
    pub parent_session: Option<String>,
    pub at_ms: u64,
    /// An agent id, or `user`.
    pub writer: String,
    /// `update` or `fork`.
    pub source: String,
    pub channels: Vec<String>,
    pub schema_version: u32,
    /// The code its writer had, for a checkpoint an agent wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeRef>,
}

/// The code an agent had when it wrote a checkpoint: its branch tip, and a tree of its
/// worktree as it was (commits, staged, unstaged and untracked files, as `git add -A`
/// sees them), written without touching the agent's index or branch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CodeRef {
    /// The agent's branch tip; none when the branch names no commit.
    pub commit: Option<String>,
    pub tree: String,
    /// The repository holding the tree (the user's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<std::path::PathBuf>,
    /// Files over `salvage_max_file`, left out of the tree (paths in the worktree).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// The jailed agent whose own code store held the tree until its collect brought
    /// it into `repo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionAgent {
    pub id: String,
    pub status: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionInfo {
    pub name: String,
    pub schema: Value,
    pub channels: u64,
    /// Checkpoints still readable (compaction drops older ones).
    pub checkpoints: u64,
    /// The newest checkpoint id (0 before the first write).
    pub head: u64,
    pub oldest: u64,
    pub last_checkpoint_at_ms: Option<u64>,
    /// Size of the current state as JSON.
    pub state_bytes: u64,
    /// `active` (an agent of it is live, or it was written lately), `idle`, `suspended`
    /// (its head is out of memory, read again on use), `archived`.
    #[serde(default)]
    pub lifecycle: String,
    /// The last read or write.
    #[serde(default)]
    pub last_used_ms: u64,
    /// Whether its head is in memory (at most `session_cache` are).
    #[serde(default)]
    pub in_memory: bool,
    pub agents: Vec<SessionAgent>,
    pub forked_from: Option<String>,
    pub forked_at: Option<u64>,
}

/// A deleted session, as its audit row keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionRemoval {
    pub at_ms: u64,
    pub session: String,
    /// Who deleted it: `user`, or the daemon's own pass.
    pub by: String,
    pub reason: String,
    /// Its checkpoints, and the bytes its checkpoints and snapshots took, when deleted.
    pub checkpoints: u64,
    pub bytes: u64,
    /// Agents of it that were still live (a forced removal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_agents: Vec<String>,
    /// What else a purge deleted (`session rm --purge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged: Option<Purged>,
}

/// What `session rm --purge` deleted besides the session itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Purged {
    /// Agents whose records and log directories were deleted.
    pub agents: Vec<String>,
    /// Their branches, with the tip each had (`git branch NAME COMMIT` brings one back).
    pub branches: Vec<DeletedRef>,
    /// The checkpoints' code refs (`refs/grove/checkpoints/<session>/<n>`).
    pub checkpoint_refs: Vec<DeletedRef>,
    /// Their salvage refs, when asked (`salvage_too`).
    pub salvage_refs: Vec<DeletedRef>,
}

/// A ref grove deleted: where, which, and the commit it named.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeletedRef {
    pub repo: std::path::PathBuf,
    pub name: String,
    pub commit: String,
}

/// Which session a state call is about. Inside an agent the token says it (and an agent
/// may only name its own session); elsewhere `session` does.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionRef {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
}

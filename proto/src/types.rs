//! Records the daemon hands out.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// Where an agent is in its life. See docs/architecture.md, "An agent's life".
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Queued,
    Preparing,
    Running,
    /// Running, with its whole process tree frozen (`grove pause`) until `grove resume`.
    Paused,
    /// The process ended; its worktree is being collected.
    Exited,
    /// Finished and collected: the branch holds everything the agent produced.
    Collected,
    /// Its process vanished while nobody watched and left no exit record.
    Lost,
    Cancelled,
}

impl AgentStatus {
    /// True while the agent's processes exist (running or paused).
    pub fn is_running(self) -> bool {
        matches!(self, AgentStatus::Running | AgentStatus::Paused)
    }

    /// True once nothing more will happen to the agent.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            AgentStatus::Collected | AgentStatus::Lost | AgentStatus::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Queued => "queued",
            AgentStatus::Preparing => "preparing",
            AgentStatus::Running => "running",
            AgentStatus::Paused => "paused",
            AgentStatus::Exited => "exited",
            AgentStatus::Collected => "collected",
            AgentStatus::Lost => "lost",
            AgentStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a running agent is doing beyond running. Kept beside the status, so that
/// everything that asks "is it running?" keeps one answer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// Blocked reading its terminal with its output quiet, or said so itself
    /// (`grove status waiting`).
    Waiting,
}

impl Activity {
    pub fn as_str(self) -> &'static str {
        match self {
            Activity::Waiting => "waiting",
        }
    }
}

/// The size of a terminal, in character cells.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl Default for TtySize {
    fn default() -> Self {
        TtySize { rows: 24, cols: 80 }
    }
}

/// How an agent's process ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    Failed,
    Killed,
    TimedOut,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Killed => "killed",
            Outcome::TimedOut => "timed_out",
        }
    }
}

/// How a new worktree is made ready, from `[worktree]` of the repository's `.grove.toml`
/// (plus `.worktreeinclude`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorktreeSetup {
    /// Paths (relative to the repository root) copied from the main checkout.
    #[serde(default)]
    pub copy: Vec<String>,
    /// Paths symlinked to the main checkout's copy (shared, not duplicated).
    #[serde(default)]
    pub symlink: Vec<String>,
    /// Shell commands run in the new worktree before the agent, logged to its log.
    #[serde(default)]
    pub setup: Vec<String>,
}

impl WorktreeSetup {
    pub fn is_empty(&self) -> bool {
        self.copy.is_empty() && self.symlink.is_empty() && self.setup.is_empty()
    }
}

/// Resource limits applied to the agent's command (rlimits).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// RLIMIT_NOFILE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
    /// RLIMIT_AS, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// RLIMIT_CPU, in seconds (per process: SIGXCPU at the limit, SIGKILL a second later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Processes (and threads) the whole tree may have at once: `pids.max` of the
    /// agent's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_procs: Option<u64>,
}

/// Everything known about one agent. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentRecord {
    pub id: String,
    pub name: Option<String>,
    pub session: String,
    /// The repository's main working directory.
    pub repo: PathBuf,
    /// What the base was given as (a branch name, or a commit when HEAD was detached).
    pub base_ref: String,
    pub base_commit: String,
    pub branch: String,
    pub worktree: PathBuf,
    pub log_path: PathBuf,
    pub argv: Vec<String>,
    /// Names of the variables given with `--env`; their values are never recorded.
    pub env_names: Vec<String>,
    pub limits: Limits,
    pub timeout_ms: Option<u64>,
    pub keep: bool,
    pub status: AgentStatus,
    pub outcome: Option<Outcome>,
    pub pid: Option<u32>,
    pub created_at_ms: u64,
    pub started_at_ms: Option<u64>,
    pub ended_at_ms: Option<u64>,
    pub collected_at_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Commit at the tip of the branch after collection.
    pub head_commit: Option<String>,
    pub files_changed: Option<u64>,
    pub insertions: Option<u64>,
    pub deletions: Option<u64>,
    /// False when the branch held nothing beyond the base and was deleted.
    pub branch_exists: bool,
    /// True when collection committed leftovers onto the branch.
    pub salvaged: bool,
    /// Why the agent could not run or be collected normally, when that happened.
    pub error: Option<String>,
    /// Set when salvage could not save everything the worktree held (the worktree is
    /// then kept): what went wrong, or which files were left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salvage_error: Option<String>,
    /// True when the agent changed grove's git layout of its worktree (`.git`, the
    /// admin dir): collect kept the worktree and did not salvage through it.
    #[serde(default)]
    pub tampered: bool,
    /// True when its checkout was cloned from grove's template of its base
    /// (copy-on-write, on a filesystem with reflinks), not checked out file by file.
    #[serde(default)]
    pub cloned: bool,
    /// Place in the queue (1 = next to start) while the agent is queued.
    #[serde(default)]
    pub queue_position: Option<u64>,
    /// The agent that spawned this one, if an agent did.
    #[serde(default)]
    pub parent: Option<String>,
    /// 0 for agents the user spawned, parent's depth + 1 for agents spawned by agents.
    #[serde(default)]
    pub depth: u32,
    /// The agent's final message for its parent (`grove report`).
    #[serde(default)]
    pub report: Option<String>,
    /// How its worktree was set up (copied and linked paths are never salvaged).
    #[serde(default, skip_serializing_if = "WorktreeSetup::is_empty")]
    pub setup: WorktreeSetup,
    /// Directories checked out (sparse, cone mode); empty: the whole tree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse: Vec<String>,
    /// How many times grove has started preparing this agent (a crash can interrupt one).
    #[serde(default)]
    pub attempt: u32,
    /// Paths grove placed in the worktree (copies, links, .worktreeinclude files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placed: Vec<String>,
    /// True when the agent ran in the Landlock write jail (`--jail`).
    #[serde(default)]
    pub jail: bool,
    /// Paths beyond the usual ones the jailed agent may write (`--jail-write`, the
    /// `jail_write` setting).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jail_write: Vec<PathBuf>,
    /// What of the user's `$HOME` was copied into the jailed agent's private home.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jail_home: Vec<String>,
    /// CPU time (user + system) of the agent's whole process tree, in milliseconds.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// Peak memory of the tree in bytes: the cgroup's `memory.peak` where the memory
    /// controller is on, else the largest resident set of any one process.
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    /// The agent has a terminal of its own (`--tty`), of this size at the start:
    /// attach, send and screen work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
    /// Its stdin stays open for `grove send` (`--stdin`, without a terminal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_stdin: bool,
    /// What a running agent is doing, where grove can tell: `None` is working (or
    /// not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
    /// Where the agent starts, relative to its worktree's root: the caller's directory
    /// in the repository. `None`: the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<PathBuf>,
    /// Size of the input given to the agent's stdin (piped into `grove spawn`); `None`:
    /// its stdin is `/dev/null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_bytes: Option<u64>,
    /// The question the agent asked (`grove ask`) and waits to have answered; while it
    /// is there the agent is `waiting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
    /// How its last question was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answered>,
}

/// A question an agent asked and waits on (`agent.ask`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Question {
    /// Chosen by the asking client, and the same when it asks again after a lost
    /// connection: that is how the ask finds its question (or its answer) again.
    pub id: String,
    pub text: String,
    /// The answers it takes; empty: any text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    pub asked_at_ms: u64,
    /// When the asker stops waiting; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// An answer to an agent's question, as its record and its session's `decisions`
/// channel keep it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Answered {
    /// The question's `id`.
    pub question_id: String,
    pub question: String,
    pub answer: String,
    /// `user`, or the id of the parent agent that answered.
    pub by: String,
    pub at_ms: u64,
    /// The checkpoint of the agent's session that records the decision.
    pub checkpoint: u64,
}

impl AgentRecord {
    /// Duration from start to end, when both are known.
    pub fn duration_ms(&self) -> Option<u64> {
        Some(self.ended_at_ms?.saturating_sub(self.started_at_ms?))
    }

    /// A short human description of the status, with the outcome once there is one.
    pub fn status_text(&self) -> String {
        let text = match (self.status, self.outcome) {
            (AgentStatus::Exited | AgentStatus::Collected, Some(Outcome::Failed)) => {
                match (self.exit_code, self.exit_signal) {
                    (Some(code), _) => format!("failed (exit {code})"),
                    (None, Some(sig)) => format!("failed (signal {sig})"),
                    _ => "failed".into(),
                }
            }
            (AgentStatus::Exited | AgentStatus::Collected, Some(outcome)) => {
                outcome.as_str().replace('_', " ")
            }
            (AgentStatus::Running, _) => match self.activity {
                Some(activity) => activity.as_str().into(),
                None => "running".into(),
            },
            (status, _) => status.as_str().into(),
        };
        match (self.tampered, &self.salvage_error, self.status) {
            (true, _, _) => format!("{text}, tampered"),
            // Not final: a collect that failed for a passing cause runs again, and the
            // work is still in the worktree (`salvage_error` says when it tries).
            (false, Some(_), AgentStatus::Exited) => format!("{text}, collecting"),
            (false, Some(_), _) => format!("{text}, salvage failed"),
            (false, None, _) => text,
        }
    }

    /// True when the agent ended well: collected after a successful run, with all its
    /// work saved.
    pub fn succeeded(&self) -> bool {
        self.status == AgentStatus::Collected
            && self.outcome == Some(Outcome::Succeeded)
            && self.salvage_error.is_none()
            && !self.tampered
    }
}

/// One worktree grove removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Removal {
    pub at_ms: u64,
    pub path: PathBuf,
    /// Why: `collect`, `prune`, `disk pressure`, `orphan`, `rm`, ...
    pub reason: String,
    pub agent_id: Option<String>,
    pub repo: Option<PathBuf>,
    /// The ref that holds what the worktree held (a branch or refs/grove/salvage/...).
    pub salvage_ref: Option<String>,
    /// The commit that ref pointed to right after salvage.
    pub salvage_commit: Option<String>,
}

/// A ref under refs/grove/salvage/ in one repository.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SalvageRef {
    pub repo: PathBuf,
    pub name: String,
    pub commit: String,
    pub time_ms: u64,
    pub subject: String,
}

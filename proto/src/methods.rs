//! Every method: its name, its params and its result, in one place.

use crate::state::{CheckpointInfo, SchemaText, SessionInfo, SessionRemoval, StateWrite};
use crate::types::{AgentRecord, Answered, Limits, Removal, SalvageRef, TtySize};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// A method of the protocol, tying its name to its typed params and result, and saying
/// who may call it: the trait has no default, so a method cannot be added without
/// deciding that, and the daemon admits each call by it (docs/protocol.md, "Authority").
pub trait Method {
    const NAME: &'static str;
    const CALLERS: Callers;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

/// Who may call a method. The user (a connection from outside every agent) may call
/// every method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Callers {
    /// Any caller; a method that acts on agents finds them among those its caller may
    /// see (an agent: itself and the agents it spawned).
    Anyone,
    /// The user only: an agent is told it may not do what the text says.
    User(&'static str),
    /// The user on the session it names, an agent on its own session only.
    OwnSession,
}

macro_rules! methods {
    ($($ty:ident: $name:literal, $callers:expr, $params:ty => $result:ty;)*) => {
        $(
            pub struct $ty;
            impl Method for $ty {
                const NAME: &'static str = $name;
                const CALLERS: Callers = $callers;
                type Params = $params;
                type Result = $result;
            }
        )*

        /// Every method name the daemon serves.
        pub const ALL_METHODS: &[&str] = &[$($name),*];

        /// Who may call each method, by name.
        pub const METHOD_CALLERS: &[(&str, Callers)] = &[$(($name, $callers)),*];
    };
}

use Callers::{Anyone, OwnSession, User};

methods! {
    Hello: "hello", Anyone, HelloParams => HelloResult;
    Spawn: "agent.spawn", Anyone, SpawnParams => AgentRecord;
    List: "agent.list", Anyone, ListParams => AgentList;
    Get: "agent.get", Anyone, IdParams => AgentRecord;
    Wait: "agent.wait", Anyone, WaitParams => AgentList;
    Kill: "agent.kill", Anyone, IdParams => AgentRecord;
    Pause: "agent.pause", Anyone, IdParams => AgentRecord;
    Resume: "agent.resume", Anyone, IdParams => AgentRecord;
    Report: "agent.report", Anyone, ReportParams => AgentRecord;
    Logs: "agent.logs", Anyone, LogsParams => LogsResult;
    Diff: "agent.diff", Anyone, DiffParams => DiffResult;
    EventsSubscribe: "events.subscribe", Anyone, SubscribeParams => SubscribeResult;
    Queue: "agent.queue", User("see the queue"), Empty => AgentList;
    Remove: "agent.remove", User("remove worktrees"), IdParams => AgentRecord;
    Discard: "agent.discard", User("discard branches"), IdParams => DiscardResult;
    Merged: "agent.merged", User("record merges"), MergedParams => AgentRecord;
    Lease: "repo.lease", User("lease repositories"), LeaseParams => LeaseResult;
    Gc: "janitor.gc", User("run the prune pass"), GcParams => GcReport;
    GcLog: "janitor.log", User("read the removal log"), GcLogParams => GcLogResult;
    Salvaged: "salvage.list", User("list salvage refs"), Empty => SalvagedResult;
    Restore: "salvage.restore", User("restore salvage refs"), RestoreParams => RestoreResult;
    Trust: "repo.trust", User("approve a repository's .grove.toml (grove trust)"), TrustParams => TrustResult;
    SessionCreate: "session.create", User("create sessions"), SessionCreateParams => SessionInfo;
    SessionList: "session.list", Anyone, SessionListParams => SessionListResult;
    SessionShow: "session.show", Anyone, SessionShowParams => SessionInfo;
    SessionRm: "session.rm", User("delete sessions"), SessionRmParams => SessionRemoval;
    SessionMigrate: "session.migrate", User("migrate sessions"), SessionMigrateParams => SessionMigrateResult;
    StateUpdate: "state.update", OwnSession, StateUpdateParams => StateUpdateResult;
    StateGet: "state.get", OwnSession, StateGetParams => StateGetResult;
    StateHistory: "state.history", OwnSession, StateHistoryParams => StateHistoryResult;
    StateFork: "state.fork", OwnSession, StateForkParams => SessionInfo;
    StateCode: "state.code", OwnSession, StateCodeParams => StateCodeResult;
    StateCompact: "state.compact", User("compact state"), StateCompactParams => StateCompactResult;
    StatePin: "state.pin", User("pin checkpoints"), StatePinParams => StatePinResult;
    StateWatch: "state.watch", OwnSession, StateWatchParams => StateWatchResult;
    Attach: "agent.attach", Anyone, AttachParams => AttachResult;
    Send: "agent.send", Anyone, SendParams => SendResult;
    Screen: "agent.screen", Anyone, ScreenParams => ScreenResult;
    SetActivity: "agent.activity", Anyone, ActivityParams => AgentRecord;
    Ask: "agent.ask", Anyone, AskParams => AskResult;
    Answer: "agent.answer", Anyone, AnswerParams => Answered;
    DaemonStatus: "daemon.status", Anyone, Empty => DaemonStatusResult;
    DaemonStop: "daemon.stop", User("stop the daemon"), Empty => Empty;
    DaemonMetrics: "daemon.metrics", User("read the daemon's metrics"), Empty => MetricsResult;
    DaemonProbe: "daemon.probe", User("probe the daemon's machine"), Empty => ProbeResult;
}

/// The optional param that every method in [`CHANGING_METHODS`] accepts: a string the
/// client chooses (1 to 128 bytes), so that a request sent again after a lost
/// connection gets the first answer instead of a second effect (docs/protocol.md,
/// "Retries and idempotency").
pub const IDEMPOTENCY_KEY: &str = "idempotency_key";

/// Sent (`true`) with a request sent again under its [`IDEMPOTENCY_KEY`]: only such a
/// request makes the daemon look the key up first. A first attempt is not looked up
/// (a lookup per request halved the rate of state updates); its key is stored with
/// its effect all the same.
pub const IDEMPOTENCY_RETRY: &str = "idempotency_retry";

/// Methods that change something: they take an [`IDEMPOTENCY_KEY`].
pub const CHANGING_METHODS: &[&str] = &[
    Spawn::NAME,
    Kill::NAME,
    Report::NAME,
    Remove::NAME,
    Gc::NAME,
    Restore::NAME,
    Trust::NAME,
    SessionCreate::NAME,
    SessionRm::NAME,
    SessionMigrate::NAME,
    StateUpdate::NAME,
    StateFork::NAME,
    StateCompact::NAME,
    StatePin::NAME,
    Send::NAME,
    SetActivity::NAME,
    Answer::NAME,
    Pause::NAME,
    Resume::NAME,
    Discard::NAME,
    Merged::NAME,
];

/// Methods a client never sends again on a new connection: a `daemon.stop` sent
/// again would stop the daemon that replaced the stopped one.
pub const NEVER_RETRIED: &[&str] = &[DaemonStop::NAME];

/// Methods after whose answer notifications follow: sent again on a new connection,
/// they resume the stream.
pub const SUBSCRIPTIONS: &[&str] = &[StateWatch::NAME, EventsSubscribe::NAME];

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
    /// Variables set for the agent on top of its environment (`--env`).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// The spawning client's own environment, which the agent runs with (less grove's
    /// identity and git location variables). `None` (an older client): a minimal one.
    #[serde(default)]
    pub caller_env: Option<Vec<EnvVar>>,
    /// Pass on only PATH, HOME, USER, LOGNAME, LANG, `env_keep` and the `env_allow`
    /// setting of `caller_env` (`--env-clear`).
    #[serde(default)]
    pub env_clear: bool,
    /// Names kept by `env_clear` (`--env-keep`).
    #[serde(default)]
    pub env_keep: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub limits: Limits,
    /// Keep the worktree after collection.
    #[serde(default)]
    pub keep: bool,
    /// Check out only these directories (sparse checkout, cone mode); default: all.
    #[serde(default)]
    pub sparse: Vec<String>,
    #[serde(default)]
    pub session: Option<String>,
    /// The session's schema when the session is new; default: `[state]` of the
    /// repository's `.grove.toml`.
    #[serde(default)]
    pub schema: Option<SchemaText>,
    /// Confine the agent's writes with Landlock (`--jail`); `None`: the daemon's
    /// `jail` setting decides.
    #[serde(default)]
    pub jail: Option<bool>,
    /// More paths the jailed agent may write beneath (`--jail-write`).
    #[serde(default)]
    pub jail_write: Vec<PathBuf>,
    /// What of `$HOME` (paths relative to it) is copied into the jailed agent's
    /// private home: its preset's `jail_home`. Ignored without a jail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jail_home: Vec<String>,
    /// Paths in the worktree its preset's CLI writes for itself (history, caches):
    /// never salvaged onto its branch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cli_files: Vec<String>,
    /// Give the agent a terminal of its own (`--tty`): it can then be attached to,
    /// sent keys and read from.
    #[serde(default)]
    pub tty: bool,
    /// The terminal's first size (the spawning terminal's); default 24x80.
    #[serde(default)]
    pub tty_size: Option<TtySize>,
    /// Keep the agent's stdin open for `agent.send` (`--stdin`; without a terminal).
    #[serde(default)]
    pub keep_stdin: bool,
    /// The agent's standard input, base64 (input piped into `grove spawn`); at most
    /// [`crate::MAX_SPAWN_STDIN_BYTES`] bytes. `None`: `/dev/null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_b64: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Include finished agents (collected, lost, cancelled).
    #[serde(default)]
    pub all: bool,
    /// Continue after this agent (the `next` of the previous page).
    #[serde(default)]
    pub after: Option<String>,
    /// Most records in one answer (default and cap 1,000; answers also stop short of
    /// the line cap).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentList {
    pub agents: Vec<AgentRecord>,
    /// More records follow: pass this as `after` to get them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdParams {
    /// A full agent id or any unique prefix of one.
    pub id: String,
}

/// A discarded agent branch: gone, its tip kept under a salvage ref until retention.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiscardResult {
    pub id: String,
    pub branch: String,
    /// The branch's tip when it was deleted.
    pub commit: String,
    /// `refs/grove/salvage/discarded-<id>`, which holds `commit`.
    pub salvage_ref: String,
}

/// What `grove merge` did with an agent's branch, for the daemon to record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MergedParams {
    pub id: String,
    /// The branch merged into.
    pub target: String,
    /// `merge`, `squash` or `rebase`.
    pub mode: String,
    /// The agent tip the target now holds.
    pub tip: String,
    /// The commit the merge made on the target, if it made one.
    #[serde(default)]
    pub commit: Option<String>,
    /// `--delete` deleted the agent's branch.
    #[serde(default)]
    pub deleted: bool,
}

/// `repo.lease`: the repository's lane, held for the caller until its connection closes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LeaseParams {
    /// A path inside the repository.
    pub repo: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaseResult {
    /// The repository's main worktree.
    pub repo: PathBuf,
    /// Where the holder puts temporary worktrees (`merge-<pid>-...`): under the
    /// worktree root, where the janitor salvages and removes what a crash left.
    pub temp_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    pub ids: Vec<String>,
    /// `all` (default): return when every agent is finished; `any`: when one is.
    #[serde(default)]
    pub mode: WaitMode,
    /// `finished` (default), or `waiting`: also return once the agent waits for input.
    #[serde(default)]
    pub until: WaitUntil,
    /// Return after this long even if not all (`any`: none) have arrived, with every
    /// agent's record as it is then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitUntil {
    #[default]
    Finished,
    Waiting,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    #[default]
    All,
    Any,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReportParams {
    /// A short final message for the agent's parent (at most 64 KiB).
    pub text: String,
    /// Which agent reports: implied inside an agent (its process tree, or GROVE_TOKEN).
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    pub id: String,
    /// Byte offset to start at (default 0).
    #[serde(default)]
    pub offset: u64,
    /// Most bytes to return (default and cap: 512 KiB).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogsResult {
    pub id: String,
    /// The bytes read, as UTF-8 (invalid sequences replaced).
    pub text: String,
    pub offset: u64,
    /// Where to continue from.
    pub next_offset: u64,
    /// The agent has ended and `next_offset` is the end of its log.
    pub complete: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiffParams {
    pub id: String,
    /// Only the diffstat.
    #[serde(default)]
    pub stat: bool,
    /// Limit to these paths (relative to the repository root).
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiffResult {
    pub id: String,
    pub branch: String,
    pub base_commit: String,
    /// `git diff <base>...<branch>` output; empty when the branch holds nothing.
    pub diff: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    /// Only events of this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Only events of this agent (an id or unique prefix).
    #[serde(default)]
    pub agent: Option<String>,
}

/// After this answer, events arrive as notifications on the same connection:
/// `agent.queued`, `agent.started`, `agent.exited`, `agent.collected`, `agent.discarded`
/// (params: the agent record), `state.updated`, `janitor.removed` (a removal), `disk.pressure`; and
/// `events.lagged` `{"missed", "resync"}` if the connection fell behind.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubscribeResult {
    pub subscribed: bool,
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
    /// Warm-pool worktrees: checked out ahead of time for the next spawns.
    #[serde(default)]
    pub pool: Vec<PoolWorktree>,
    /// When the janitor's prune pass last ran and runs next (ms since the epoch).
    #[serde(default)]
    pub last_prune_ms: Option<u64>,
    #[serde(default)]
    pub next_prune_ms: Option<u64>,
    /// The same for the sessions' garbage collection, where the daemon has one.
    #[serde(default)]
    pub last_session_gc_ms: Option<u64>,
    #[serde(default)]
    pub next_session_gc_ms: Option<u64>,
    /// True while the start-up recovery still runs in the background (after the socket
    /// opened): interrupted preparations being rolled back, agents that ended while no
    /// daemon ran being collected, the start-up scan of the worktree root.
    #[serde(default)]
    pub recovering: bool,
    /// How many agents the recovery still works on.
    #[serde(default)]
    pub recovery_pending: u64,
    /// Every setting as this daemon read it at its start, as config.toml writes it: a
    /// changed config.toml applies only at the next start, and `grove config` says so.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, String>,
}

/// `daemon.probe`: what this machine gives agents, probed by the daemon itself: agents'
/// cgroups go below the daemon's own, which may differ from the caller's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeResult {
    pub cgroup: CgroupProbe,
    pub jail: JailProbe,
}

/// The cgroup an agent gets: made, a process moved into it, removed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CgroupProbe {
    /// Where the cgroup2 hierarchy is mounted; none without one.
    pub mount_point: Option<PathBuf>,
    pub read_write: bool,
    /// The daemon's own cgroup (below the mount), under which agents' cgroups go.
    pub daemon_cgroup: Option<String>,
    /// An agent's cgroup could be made and a process moved into it.
    pub agent_cgroup: bool,
}

/// What a jailed spawn (`--jail`) would meet.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JailProbe {
    /// The kernel's Landlock ABI (0: none).
    pub abi: i32,
    pub required_abi: i32,
    /// Agents' cgroups can be made (the jail needs one to hold the tree).
    pub cgroup: bool,
    /// Why a jailed spawn would be refused; `None` when it would run.
    pub refusal: Option<String>,
    /// Each guarantee of the jail (README, "Security model") and whether this machine
    /// gives it; `--jail` is refused unless all hold.
    #[serde(default)]
    pub guarantees: Vec<JailGuarantee>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JailGuarantee {
    /// What a jailed agent is held to, as the README words it.
    pub guarantee: String,
    pub holds: bool,
    /// What of this machine it rests on.
    pub rests_on: String,
}

/// `daemon.metrics`: every metric as now, and each service level against its objective.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricsResult {
    pub metrics: Vec<Metric>,
    pub slos: Vec<SloStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Metric {
    /// The Prometheus name, e.g. `grove_spawn_seconds`.
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    pub help: String,
    pub series: Vec<Series>,
}

/// One labelled value of a metric. A histogram's `value` is its count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Series {
    #[serde(default)]
    pub labels: Vec<(String, String)>,
    pub value: f64,
    #[serde(default)]
    pub histogram: Option<HistogramValue>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HistogramValue {
    pub sum: f64,
    /// (upper bound, cumulative count); the last bound is +Inf, written as `null`.
    pub buckets: Vec<(Option<f64>, u64)>,
}

/// One service level: its objective, where it stands, and whether it is breached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SloStatus {
    /// e.g. `checkpoint_save_p95`.
    pub name: String,
    /// In words, e.g. `checkpoint save p95 < 80ms`.
    pub objective: String,
    /// The measured value (None: no samples in the window).
    pub value: Option<f64>,
    pub threshold: f64,
    /// `s`, `bytes`, or `count`.
    pub unit: String,
    pub breached: bool,
}

/// One warm-pool worktree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolWorktree {
    pub repo: PathBuf,
    pub path: PathBuf,
    /// The commit it is (being) checked out at.
    pub commit: String,
    /// Checked out and ready to hand to a spawn.
    pub ready: bool,
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
    /// `refs/grove/salvage/discarded-*` refs older than `retention`, deleted.
    #[serde(default)]
    pub refs_expired: Vec<String>,
    /// Idle worktrees left in place, each with why (a salvage that could not save
    /// everything, a tampered layout, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
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
    /// Deleted sessions, oldest first.
    #[serde(default)]
    pub sessions: Vec<SessionRemoval>,
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
    /// The record that tracks the restored worktree, like an agent's.
    #[serde(default)]
    pub id: String,
    pub branch: String,
    pub worktree: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TrustParams {
    /// A path inside the repository whose `.grove.toml` is approved (or revoked).
    pub repo: PathBuf,
    /// Withdraw the approval instead of giving it.
    #[serde(default)]
    pub revoke: bool,
    /// Only read and check the file: the answer says what would be approved (its setup
    /// and `sha256`), and nothing is stored.
    #[serde(default)]
    pub preview: bool,
    /// Approve only if the file's content still has this SHA-256 (hex): the one the
    /// client showed the user from a preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrustResult {
    /// The `.grove.toml` the answer is about.
    pub file: PathBuf,
    /// Its setup commands, exactly as approved (empty when revoking or when it has none).
    pub setup: Vec<String>,
    /// SHA-256 of the approved content (hex); absent when revoking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Revoking: whether there was an approval to withdraw.
    #[serde(default)]
    pub revoked: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    pub name: String,
    /// The schema in its JSON form: `{"version": 1, "channels": {"n": {"reducer": "add"}}}`.
    #[serde(default)]
    pub schema: Option<Value>,
    /// Or as TOML text with a `[state]` table.
    #[serde(default)]
    pub schema_text: Option<SchemaText>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionListResult {
    pub sessions: Vec<SessionInfo>,
    /// Present when more sessions follow: pass it as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// Only sessions whose names sort after this one (a previous answer's `next`).
    #[serde(default)]
    pub after: Option<String>,
    /// Most sessions in this answer (default and most: 1000); an answer also stops
    /// before the line cap.
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionShowParams {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionMigrateParams {
    pub name: String,
    /// The new schema in its JSON form, or as TOML text (`schema_text`).
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub schema_text: Option<SchemaText>,
    /// Channels of the old schema to drop (with their values).
    #[serde(default)]
    pub drop: Vec<String>,
    /// Channels of the old schema to keep, with their values, under new names (old
    /// name to new).
    #[serde(default)]
    pub rename: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionMigrateResult {
    pub session: String,
    /// The migration's checkpoint (source `migrate`).
    pub checkpoint: u64,
    pub added: Vec<String>,
    pub dropped: Vec<String>,
    /// Channels whose reducer changed.
    pub changed: Vec<String>,
    /// Channels whose values a step of the schema's chain converted or mapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub converted: Vec<String>,
    /// Channels renamed, old name to new.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub renamed: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionRmParams {
    pub name: String,
    /// Delete it even while agents of it are live (their later state calls fail).
    #[serde(default)]
    pub force: bool,
    /// Why, for the audit row (default `rm`).
    #[serde(default)]
    pub reason: Option<String>,
    /// Delete also its checkpoints' code refs, its agents' records, logs and branches.
    #[serde(default)]
    pub purge: bool,
    /// With `purge`: delete also its agents' salvage refs (kept otherwise).
    #[serde(default)]
    pub salvage_too: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StateUpdateParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    /// One atomic batch, applied in order.
    pub writes: Vec<StateWrite>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateUpdateResult {
    pub session: String,
    /// The checkpoint this batch created; it is durable when this answer arrives.
    pub checkpoint: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateGetParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    /// Read the state as it was right after this checkpoint (default: the newest).
    #[serde(default)]
    pub at: Option<u64>,
    /// Read `at`'s state carried through every migration since, in the newest schema
    /// (otherwise it reads in the schema it was written under).
    #[serde(default)]
    pub migrate: bool,
    /// Only this channel.
    #[serde(default)]
    pub channel: Option<String>,
    /// Read the state's JSON text in pages, from this byte (a previous answer's
    /// `page.next`; pass its `checkpoint` as `at` too, so that every page is of one state).
    #[serde(default)]
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StateGetResult {
    pub session: String,
    pub checkpoint: u64,
    /// The whole state, or the one channel's value when a channel was asked for; null
    /// when the answer comes in pages (`page`).
    pub state: Value,
    /// Present when the value does not fit in one answer (or `offset` was given): one
    /// page of its JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<StatePage>,
}

/// One page of a state's JSON text; the pages joined are the whole text.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatePage {
    /// Where this page starts, in bytes of the whole text.
    pub offset: u64,
    /// Length of the whole text in bytes.
    pub bytes: u64,
    pub text: String,
    /// Where the next page starts; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateHistoryParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    /// Newest checkpoints to return (default 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only checkpoints older than this one (a previous answer's `next`).
    #[serde(default)]
    pub before: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateHistoryResult {
    pub session: String,
    /// Newest first.
    pub checkpoints: Vec<CheckpointInfo>,
    /// Present when the answer stopped short of `limit` to stay within the line cap:
    /// pass it as `before` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StatePinParams {
    pub session: String,
    /// The checkpoint to keep readable through compaction.
    pub at: u64,
    /// Unpin it instead.
    #[serde(default)]
    pub unpin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatePinResult {
    pub session: String,
    /// Every pinned checkpoint of the session, oldest first.
    pub pinned: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateForkParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    pub at: u64,
    pub new_session: String,
    /// Start with the newest schema, the state carried through every migration after
    /// `at`; otherwise the fork has the schema `at` was written under.
    #[serde(default)]
    pub migrate: bool,
}

/// `state.code`: the code recorded at a checkpoint as a commit a spawn can start from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateCodeParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    pub at: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateCodeResult {
    pub session: String,
    pub at: u64,
    /// The repository the code is in.
    pub repo: std::path::PathBuf,
    /// `refs/grove/checkpoints/<session>/<at>`, a commit of the recorded tree.
    #[serde(rename = "ref")]
    pub reference: String,
    pub commit: String,
    pub tree: String,
    /// Files over `salvage_max_file` the checkpoint left out of its code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateCompactParams {
    pub session: String,
    /// Checkpoints to keep readable (the newest ones); at least 1.
    pub keep: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateCompactResult {
    pub session: String,
    pub dropped: u64,
    /// The oldest checkpoint still readable.
    pub oldest: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateWatchParams {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
}

/// After this answer, `state.updated` notifications follow on the same connection:
/// `{"session", "checkpoint", "writer", "channels", "at_ms"}`; if the connection falls
/// behind, one `state.lagged` notification `{"session", "missed"}` says so (read the
/// state with `state.get` to resync).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateWatchResult {
    pub session: String,
    pub checkpoint: u64,
}

/// Every notification the daemon pushes (after `events.subscribe` or `state.watch`).
pub const ALL_EVENTS: &[&str] = &[
    "agent.queued",
    "agent.started",
    "agent.paused",
    "agent.resumed",
    "agent.exited",
    "agent.collected",
    "agent.discarded",
    "agent.merged",
    "agent.waiting",
    "agent.working",
    "agent.answered",
    "state.updated",
    "session.lifecycle",
    "janitor.removed",
    "disk.pressure",
    "events.lagged",
    "state.lagged",
    "slo.breached",
    "slo.recovered",
];

/// Connection-scoped: after the answer the connection carries the agent's terminal.
/// The daemon sends `attach.output` notifications (`{"data": base64}`), and at the end
/// one `attach.end` (`{"record": AgentRecord}` once the agent ended, or `{"reason":
/// text}` when the terminal went away otherwise). The client sends `attach.input`
/// (`{"data": base64}`) and `attach.resize` (`{"rows", "cols"}`) notifications, in
/// order, on the same connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AttachParams {
    pub id: String,
    /// Watch only: input and resizes are refused.
    #[serde(default)]
    pub read_only: bool,
    /// The attaching terminal's size: the agent's terminal takes it (the last viewer
    /// to attach or resize wins).
    #[serde(default)]
    pub size: Option<TtySize>,
    /// Hand this client a connection to the agent's console itself (SCM_RIGHTS, with
    /// the answer), to speak its binary frames (grove_proto::console) without the
    /// daemon in between: what `grove attach` does. Off: JSON notifications.
    #[serde(default)]
    pub direct: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AttachResult {
    pub id: String,
    /// Escape sequences that redraw the current screen on an empty terminal, base64
    /// (empty with `direct`: the console sends it when asked to `Watch`).
    pub screen: String,
    pub size: TtySize,
    /// A connection to the console came with this answer.
    #[serde(default)]
    pub direct: bool,
}

/// Notification names and params of an attached connection.
pub mod attach {
    use super::*;

    pub const OUTPUT: &str = "attach.output";

    pub use crate::b64::{decode, encode};
    pub const END: &str = "attach.end";
    pub const INPUT: &str = "attach.input";
    pub const RESIZE: &str = "attach.resize";

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
    #[serde(deny_unknown_fields)]
    pub struct Data {
        /// Bytes, base64 (standard alphabet, padded).
        pub data: String,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    pub struct End {
        /// The agent's record once it ended (its outcome, exit code).
        #[serde(default)]
        pub record: Option<AgentRecord>,
        /// Why the terminal went away when the agent did not end.
        #[serde(default)]
        pub reason: Option<String>,
    }
}

/// Types into the agent's terminal, or writes to its kept-open stdin.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SendParams {
    pub id: String,
    /// Text to type.
    #[serde(default)]
    pub text: Option<String>,
    /// Bytes to type, base64 (instead of `text`, for control keys and binary).
    #[serde(default)]
    pub data: Option<String>,
    /// Press Enter after the text (`\r` on a terminal, `\n` on stdin).
    #[serde(default)]
    pub enter: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SendResult {
    pub id: String,
    /// Bytes handed to the terminal (or stdin).
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScreenParams {
    pub id: String,
    /// With the escape sequences for colours and attributes.
    #[serde(default)]
    pub ansi: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScreenResult {
    pub id: String,
    /// The visible screen, rows separated by newlines (trailing blanks trimmed).
    pub text: String,
    pub size: TtySize,
    /// Row and column of the cursor, from 0.
    pub cursor: (u16, u16),
}

/// `grove status waiting|working` from inside an agent: what it is doing, for list,
/// top, `wait --until waiting` and notifications.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ActivityParams {
    /// Default: the calling agent itself.
    #[serde(default)]
    pub id: Option<String>,
    /// `waiting` or `working`.
    pub activity: String,
}

/// `agent.ask`: inside an agent, ask a question and wait for its answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AskParams {
    pub text: String,
    /// The answers it takes; empty: any text.
    #[serde(default)]
    pub choices: Vec<String>,
    /// Stop waiting after this long.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The client's name for this question (1 to 128 bytes), the same when it asks
    /// again after a lost connection; default: one the daemon makes.
    #[serde(default)]
    pub ask_id: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AskResult {
    /// The asking agent.
    pub id: String,
    /// The answer, with who gave it; `None` when the ask timed out.
    pub answered: Option<Answered>,
    pub timed_out: bool,
}

/// `agent.answer`: the user, or the parent agent, answers an agent's question.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnswerParams {
    /// The asking agent: id, unique prefix or name.
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub token: Option<String>,
}

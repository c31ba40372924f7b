//! The daemon's core: the one owner of the agent table and the queue. Everyone talks to
//! it through [`CoreHandle`]; slow work (git, waiting for processes) runs in tasks that
//! report back with messages, so the core never waits on git or on a process.

mod agents;
mod ask;
mod discard;
mod handle;
mod history;
mod lifecycle;
mod pause;
mod pool;
mod prepare;
mod queue;
mod recover;
mod restore;
mod save;
mod spawn;
mod table;

pub use ask::Asked;
pub use handle::{Accepted, CoreHandle};

pub use spawn::NewAgent;
pub use table::{ListPage, Listed};

use crate::config::Config;
use crate::db::Db;
use crate::error::Error;
use crate::events::EventBus;
use crate::git::collect::Collected;
use crate::git::lane::Lanes;
use crate::sessions::StateHandle;
use grove_proto::types::AgentRecord;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

type Reply<T> = oneshot::Sender<Result<T, Error>>;

pub enum Msg {
    Spawn(Box<NewAgent>, Reply<Accepted>),
    /// A spawn sent again names the agent it made (by exact id): answered as the first
    /// spawn would be, with the promise of its start while it is still being prepared;
    /// `None` when no such agent exists.
    Respawn(String, Reply<Option<Accepted>>),
    Prepared(String, Result<prepare::Prepared, Error>),
    ShimExited(String),
    Collected(String, Result<Collected, Error>),
    /// Save again the records whose last save failed.
    SaveUnsaved,
    /// Collect this agent again (its last collect failed for a cause that passes),
    /// removing its worktree for this reason when one was asked for.
    RetryCollect(String, Option<String>),
    /// An interrupted preparation found at start-up is undone.
    RolledBack(String),
    /// The abandon marker of an interrupted start, which could not be written at first,
    /// is written now.
    StartAbandoned(String),
    /// The agent an id (prefix) names; with a viewer, only among the viewer and the
    /// agents it spawned (others are answered as unknown).
    Get(String, Option<String>, Reply<AgentRecord>),
    /// A page of records ready to list.
    List(ListPage, Reply<Vec<Arc<Listed>>>),
    Queue(Reply<Vec<AgentRecord>>),
    Wait(String, Reply<oneshot::Receiver<AgentRecord>>),
    Kill(String, Reply<AgentRecord>),
    /// Freeze (`true`) or thaw an agent's tree.
    Pause(String, bool, Reply<AgentRecord>),
    /// A freeze or thaw is done.
    Froze(Box<pause::Froze>),
    /// Remove the kept worktree of a finished agent (salvaged first), for `reason`.
    RemoveKept(String, String, Reply<AgentRecord>),
    /// Delete a finished agent's branch, its tip kept under a salvage ref.
    Discard(String, Reply<grove_proto::methods::DiscardResult>),
    Discarded(
        String,
        Result<crate::git::refs::Discard, Error>,
        Reply<grove_proto::methods::DiscardResult>,
    ),
    /// `grove merge` says what it merged.
    Merged(grove_proto::methods::MergedParams, Reply<AgentRecord>),
    /// Forget finished agents' records; with `true`, their automatic sessions too
    /// (retention), without, the caller deletes the session (a purge).
    Forget(Vec<String>, bool, Reply<Vec<String>>),
    Snapshot(Reply<Vec<AgentRecord>>),
    /// How many agents the core knows, by status (without copying their records).
    CountByStatus(Reply<std::collections::BTreeMap<&'static str, u64>>),
    /// The agents of a session, oldest first.
    SessionAgents(String, Reply<Vec<grove_proto::state::SessionAgent>>),
    /// Every agent's repository and worktree, and whether it is still live.
    Worktrees(Reply<Vec<WorktreeUse>>),
    /// A batch of finished agents' rows read after the start; `None`: all are in.
    History(Result<Option<history::Finished>, Error>),
    /// The janitor's verdict on disk usage: `Some(why)` holds the queue and refuses spawns.
    DiskHold(Option<String>),
    /// The janitor removed directories under the worktree root that held slots.
    SlotsFreed,
    /// Who holds this token.
    ByToken(String, Reply<Identity>),
    /// The running agent whose shim is one of these processes (a caller's ancestry:
    /// pid and start time, from the caller upwards).
    ByAncestry(Vec<(u32, Option<u64>)>, oneshot::Sender<Option<Identity>>),
    /// The agent with this exact id, if it is live (starting or running).
    Live(String, oneshot::Sender<Option<Identity>>),
    /// Store an agent's report for its parent.
    Report(String, String, Reply<AgentRecord>),
    /// What a running agent is doing: waiting for input (true) or working; from its
    /// console's monitor, or said by the agent itself.
    Activity(String, bool, Option<Reply<AgentRecord>>),
    /// An agent asks a question (`grove ask`) and waits for its answer.
    Ask(String, grove_proto::types::Question, Reply<Asked>),
    /// The user (`by` none) or an agent answers the question of the agent named.
    Answer {
        target: String,
        by: Option<String>,
        text: String,
        reply: Reply<grove_proto::types::Answered>,
    },
    /// A question's deadline passed: it goes, if it is still the one of this id.
    Unask(String, String),
    /// A warm-pool worktree was checked out (at this commit), or could not be.
    PoolFilled(PathBuf, Result<String, Error>),
    /// A warm-pool worktree was removed (salvaged to this ref if it held anything).
    PoolEvicted(PathBuf, Result<Option<String>, Error>),
    /// Remove the warm pool (for good if the flag says so: shutdown), answer when done.
    PoolDrain(oneshot::Sender<()>, bool),
    /// Check out a salvage ref under the worktree root and track it (`grove restore`).
    Restore(crate::git::target::RepoTarget, String, Reply<AgentRecord>),
    Restored(
        String,
        Result<crate::git::refs::Restored, Error>,
        Reply<AgentRecord>,
    ),
    /// Live agents, the warm pool and recovery, for `daemon.status`.
    Status(oneshot::Sender<Status>),
}

impl Msg {
    /// Whether this message reports a worktree directory made or removed (by a task of
    /// the core's, or by the janitor: `SlotsFreed`). Every directory under the worktree
    /// root is made by such a task (counted as a slot by its row or pool entry until it
    /// reports) or by `grove merge` under a lease (whose release reports); so a listing
    /// read after the last of these messages misses none that counts.
    fn changes_worktrees(&self) -> bool {
        matches!(
            self,
            Msg::Prepared(..)
                | Msg::Collected(..)
                | Msg::RolledBack(..)
                | Msg::StartAbandoned(..)
                | Msg::PoolFilled(..)
                | Msg::PoolEvicted(..)
                | Msg::Restored(..)
                | Msg::SlotsFreed
        )
    }
}

/// Where an agent's worktree is (or was), for the janitor's start-up scan: a slice of
/// the record, since cloning 10,000 whole records showed in start-up time.
#[derive(Debug, Clone)]
pub struct WorktreeUse {
    pub repo: PathBuf,
    pub worktree: PathBuf,
    pub live: bool,
}

/// What `daemon.status` asks of the core.
#[derive(Debug, Default)]
pub struct Status {
    pub agents_live: u64,
    pub pool: Vec<grove_proto::methods::PoolWorktree>,
    /// Agents whose start-up recovery (a rollback, a collect) has not finished yet.
    pub recovering: u64,
}

/// An agent acting as a client: itself, its session, its nesting depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub id: String,
    pub session: String,
    pub depth: u32,
    /// The agent the user spawned at the top of its tree (itself at depth 0): the
    /// tree shares one budget of connections.
    pub root: String,
}

pub struct Core {
    agents: table::AgentTable,
    waiters: HashMap<String, Vec<oneshot::Sender<AgentRecord>>>,
    /// The asks waiting on each agent's question (`grove ask`).
    askers: HashMap<String, Vec<oneshot::Sender<grove_proto::types::Answered>>>,
    /// Each agent's last question withdrawn at its deadline, so that its ask sent again
    /// times out instead of asking anew.
    withdrawn: HashMap<String, String>,
    /// Agents waiting for a slot, first in first out.
    queue: VecDeque<String>,
    /// User environment of agents that have not started yet (never persisted in records).
    pending_env: HashMap<String, Vec<(String, String)>>,
    /// Spawn requests waiting to hear that their agent started.
    pending_starts: HashMap<String, Reply<AgentRecord>>,
    /// `rm`/prune requests waiting for their agent's worktree to be removed.
    pending_removals: HashMap<String, Reply<AgentRecord>>,
    /// Why the next collect of an agent removes its worktree (for the removal log).
    removal_reasons: HashMap<String, String>,
    /// Collects that failed for a cause that passes, and how many times in a row.
    collect_retries: HashMap<String, u32>,
    disk_hold: Option<String>,
    pool: pool::Pool,
    /// Agents being prepared in a warm-pool worktree, and that worktree (its directory
    /// holds their slot until it is moved to the agent's path).
    adopting: HashMap<String, PathBuf>,
    /// The worktree root as last read, kept until a message reports that a directory
    /// came or went (`Msg::changes_worktrees`): the slot count reads the disk once per
    /// change, not once per check.
    worktree_listing: std::sync::OnceLock<std::collections::HashSet<PathBuf>>,
    /// Records whose last save failed, saved again by [`Msg::SaveUnsaved`] after a
    /// pause that doubles up to a minute while saves keep failing.
    unsaved: std::collections::HashSet<String>,
    unsaved_pause: std::time::Duration,
    /// Freezes and thaws under way, by agent.
    freezing: HashMap<String, pause::Freezing>,
    /// Agents the start-up recovery still works on (rolled back or collected in the
    /// background, after the socket opened).
    recovering: std::collections::HashSet<String>,
    db: Db,
    lanes: Lanes,
    config: Arc<Config>,
    exe: PathBuf,
    state: StateHandle,
    events: EventBus,
    tx: mpsc::Sender<Msg>,
    /// Salvages (collects' hashing of a worktree) that may run at once: one per core.
    /// Each holds the worktree's index and status in memory (about 9 MiB for 50,000
    /// files), and 20 agents killed at once made the daemon's peak 190 MiB, with no
    /// gain in speed beyond the cores.
    salvages: lifecycle::Salvages,
    /// The finished agents' records, read after the start.
    history: history::History,
    /// Requests that waited for the history, handled before any new message.
    replay: VecDeque<Msg>,
}

impl Core {
    /// Loads the agent table and returns the handle at once: reconciling the table with
    /// the processes that are (or are not) still alive is the actor's first job, and its
    /// slow parts (rollbacks, collects) run in the background, so that a restart with a
    /// backlog answers its socket at once.
    pub async fn start(
        db: Db,
        lanes: Lanes,
        config: Arc<Config>,
        exe: PathBuf,
        state: StateHandle,
        events: EventBus,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<CoreHandle, Error> {
        let agents = db
            .call(|conn| {
                let mut table = table::AgentTable::with_capacity(crate::db::agents::count(conn)?);
                crate::db::agents::load_live(conn, |row| table.insert(ask::still_asking(row)))?;
                Ok(table)
            })
            .await?;
        let (tx, rx) = mpsc::channel(1024);
        let core = Core {
            agents,
            waiters: HashMap::new(),
            askers: HashMap::new(),
            withdrawn: HashMap::new(),
            queue: VecDeque::new(),
            pending_env: HashMap::new(),
            pending_starts: HashMap::new(),
            pending_removals: HashMap::new(),
            removal_reasons: HashMap::new(),
            collect_retries: HashMap::new(),
            disk_hold: None,
            pool: pool::Pool::default(),
            adopting: HashMap::new(),
            worktree_listing: std::sync::OnceLock::new(),
            salvages: lifecycle::Salvages::new(config.checkout_workers),
            recovering: Default::default(),
            freezing: HashMap::new(),
            unsaved: Default::default(),
            unsaved_pause: save::SAVE_RETRY_FIRST,
            history: history::History::Loading(VecDeque::new()),
            replay: VecDeque::new(),
            db: db.clone(),
            lanes,
            config,
            exe,
            state,
            events,
            tx: tx.clone(),
        };
        tokio::spawn(core.serve(rx, shutdown));
        tokio::spawn(history::load(db, tx.clone()));
        Ok(CoreHandle::new(tx))
    }

    async fn serve(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        self.recover().await;
        let stopped = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopped);
        loop {
            let pool_quiet = sleep_until(self.pool_deadline());
            if let Some(msg) = self.replay.pop_front() {
                self.handle(msg).await;
                continue;
            }
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => self.handle(msg).await,
                    None => break,
                },
                () = pool_quiet => self.pool_expire(),
                () = &mut stopped => break,
            }
        }
        tracing::debug!("core stopped");
    }

    /// Start-up recovery; what takes long reports back by message.
    async fn recover(&mut self) {
        let begun = std::time::Instant::now();
        self.reconcile().await;
        self.expire_stored_questions();
        self.pool_evict_leftovers();
        self.restore_queue();
        self.admit_queued().await;
        tracing::info!(
            in_background = self.recovering.len(),
            took_ms = begun.elapsed().as_millis() as u64,
            "start-up reconcile done"
        );
    }

    async fn handle(&mut self, msg: Msg) {
        let Some(msg) = self.unless_waiting_for_history(msg) else {
            return;
        };
        if msg.changes_worktrees() {
            self.worktree_listing.take();
        }
        match msg {
            Msg::Spawn(new, reply) => {
                let _ = reply.send(self.spawn(*new).await);
            }
            Msg::Respawn(id, reply) => {
                let _ = reply.send(Ok(self.respawn(&id)));
            }
            Msg::Prepared(id, result) => self.prepared(&id, result).await,
            Msg::ShimExited(id) => self.shim_exited(&id).await,
            Msg::Collected(id, result) => self.collected(&id, result).await,
            Msg::RetryCollect(id, removal) => self.retry_collect(&id, removal),
            Msg::SaveUnsaved => self.save_unsaved().await,
            Msg::RolledBack(id) => self.rolled_back(&id).await,
            Msg::StartAbandoned(id) => self.start_abandoned(&id).await,
            Msg::Get(prefix, viewer, reply) => {
                let found = self.resolve_for(&prefix, viewer.as_deref());
                let _ = reply.send(found.map(|row| row.record.clone()));
            }
            Msg::List(page, reply) => {
                let _ = reply.send(self.list(page));
            }
            Msg::Queue(reply) => {
                let _ = reply.send(Ok(self.queued_records()));
            }
            Msg::Wait(prefix, reply) => {
                let _ = reply.send(self.wait(&prefix));
            }
            Msg::Kill(prefix, reply) => {
                let result = self.kill(&prefix).await;
                let _ = reply.send(result);
            }
            Msg::Pause(prefix, frozen, reply) => self.pause(&prefix, frozen, reply),
            Msg::Froze(froze) => self.froze(*froze).await,
            Msg::RemoveKept(prefix, reason, reply) => self.remove_kept(&prefix, reason, reply),
            Msg::Discard(prefix, reply) => self.discard_branch(&prefix, reply),
            Msg::Discarded(id, result, reply) => self.branch_discarded(&id, result, reply).await,
            Msg::Merged(merged, reply) => {
                let _ = reply.send(self.merged(merged).await);
            }
            Msg::Forget(ids, sessions, reply) => {
                let _ = reply.send(self.forget(ids, sessions).await);
            }
            Msg::Snapshot(reply) => {
                let _ = reply.send(Ok(self.agents.values().map(|r| r.record.clone()).collect()));
            }
            Msg::CountByStatus(reply) => {
                let mut counts = std::collections::BTreeMap::new();
                for row in self.agents.values() {
                    *counts.entry(row.record.status.as_str()).or_default() += 1;
                }
                let _ = reply.send(Ok(counts));
            }
            Msg::SessionAgents(name, reply) => {
                let _ = reply.send(Ok(self.session_agents(&name)));
            }
            Msg::Worktrees(reply) => {
                let uses = self.agents.values().map(|row| WorktreeUse {
                    repo: row.record.repo.clone(),
                    worktree: row.record.worktree.clone(),
                    live: !row.record.status.is_final(),
                });
                let _ = reply.send(Ok(uses.collect()));
            }
            Msg::History(batch) => self.history_batch(batch),
            Msg::SlotsFreed => self.admit_queued().await,
            Msg::DiskHold(hold) => {
                let released = self.disk_hold.is_some() && hold.is_none();
                self.disk_hold = hold;
                if released {
                    self.admit_queued().await;
                }
            }
            Msg::ByToken(token, reply) => {
                let found = self
                    .agents
                    .by_token(&token)
                    .map(|row| identity(&self.agents, &row.record));
                if found.is_none() && self.history_loading() {
                    // A finished agent's, maybe: asked again once they are all in.
                    let _ = self.defer(Msg::ByToken(token, reply));
                    return;
                }
                let found = found.ok_or_else(|| {
                    Error::Refused(
                        "unknown agent token (GROVE_TOKEN); it belongs to no agent".into(),
                    )
                });
                let _ = reply.send(found);
            }
            Msg::ByAncestry(pids, reply) => {
                // The nearest shim up the chain: a daemon restarted from inside an agent
                // has that agent's shim above its own agents' shims.
                // A pid is matched with its start time, so that a reused pid never
                // stands for a shim that is gone.
                let running: HashMap<u32, (&AgentRecord, Option<u64>)> = self
                    .agents
                    .values()
                    // Paused too: its processes are still that agent's, never the user's.
                    .filter(|row| row.record.status.is_running())
                    .filter_map(|row| Some((row.record.pid?, (&row.record, row.pid_start))))
                    .collect();
                let found = pids
                    .iter()
                    .find_map(|(pid, started)| {
                        let (record, shim_started) = running.get(pid)?;
                        let same = shim_started.is_none() || *shim_started == *started;
                        same.then_some(*record)
                    })
                    .map(|record| identity(&self.agents, record));
                let _ = reply.send(found);
            }
            Msg::Live(id, reply) => {
                use grove_proto::types::AgentStatus::{Paused, Preparing, Running};
                let found = self
                    .agents
                    .get(&id)
                    .filter(|row| matches!(row.record.status, Preparing | Running | Paused))
                    .map(|row| identity(&self.agents, &row.record));
                let _ = reply.send(found);
            }
            Msg::Report(prefix, text, reply) => {
                let _ = reply.send(self.report(&prefix, text).await);
            }
            Msg::Activity(id, waiting, reply) => {
                let result = self.set_activity(&id, waiting);
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            Msg::Ask(id, question, reply) => {
                let _ = reply.send(self.ask(&id, question).await);
            }
            Msg::Answer {
                target,
                by,
                text,
                reply,
            } => {
                let _ = reply.send(self.answer(&target, by, text).await);
            }
            Msg::Unask(id, question) => self.unask(&id, &question).await,
            Msg::PoolFilled(path, result) => self.pool_filled(path, result).await,
            Msg::PoolEvicted(path, result) => self.pool_evicted(path, result).await,
            Msg::PoolDrain(done, close) => self.pool_drain(done, close),
            Msg::Restore(target, reference, reply) => self.restore(target, reference, reply),
            Msg::Restored(id, result, reply) => self.restored(&id, result, reply).await,
            Msg::Status(reply) => {
                let _ = reply.send(Status {
                    agents_live: self.live_count(),
                    pool: self.pool_status(),
                    recovering: self.recovering.len() as u64,
                });
            }
        }
    }

    fn live_count(&self) -> u64 {
        self.agents
            .values()
            .filter(|row| !row.record.status.is_final())
            .count() as u64
    }

    fn publish(&self, method: &'static str, record: &AgentRecord) {
        self.events
            .publish(method, record, Some(&record.session), Some(&record.id));
    }

    async fn report(&mut self, prefix: &str, text: String) -> Result<AgentRecord, Error> {
        const MAX_REPORT: usize = 64 * 1024;
        if text.len() > MAX_REPORT {
            return Err(Error::BadInput(format!(
                "the report is {} bytes; keep it under {MAX_REPORT} (put details in a file on the branch)",
                text.len()
            )));
        }
        let id = self.resolve(prefix)?.record.id.clone();
        let Some(row) = self.agents.get_mut(&id) else {
            return Err(Error::NotFound(format!("agent {id} vanished")));
        };
        row.record.report = Some(text);
        let record = row.record.clone();
        self.persist(&id).await?;
        Ok(record)
    }

    /// Not persisted: a restarted daemon asks the consoles again, and an agent that
    /// said it itself says it again at its next change.
    fn set_activity(&mut self, id: &str, waiting: bool) -> Result<AgentRecord, Error> {
        let id = self.resolve(id)?.record.id.clone();
        let Some(row) = self.agents.get_mut(&id) else {
            return Err(Error::NotFound(format!("agent {id} vanished")));
        };
        if row.record.status != grove_proto::types::AgentStatus::Running {
            return Err(Error::InvalidState(format!(
                "agent {id} is {}, not running",
                row.record.status_text()
            )));
        }
        let activity = waiting.then_some(grove_proto::types::Activity::Waiting);
        // An agent that asked waits for its answer, whatever its terminal looks like.
        if row.record.activity == activity || row.record.question.is_some() {
            return Ok(row.record.clone());
        }
        row.record.activity = activity;
        let record = row.record.clone();
        let method = if waiting {
            "agent.waiting"
        } else {
            "agent.working"
        };
        tracing::info!(agent = %id, "{method}");
        self.publish(method, &record);
        Ok(record)
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn identity(agents: &table::AgentTable, record: &AgentRecord) -> Identity {
    // Up the parents the table holds; a bounded walk (max_depth), and an ancestor not
    // loaded yet leaves the highest one known as the root.
    let mut root = record;
    while let Some(parent) = root.parent.as_deref().and_then(|p| agents.get(p)) {
        if parent.record.id == root.id {
            break;
        }
        root = &parent.record;
    }
    Identity {
        id: record.id.clone(),
        session: record.session.clone(),
        depth: record.depth,
        root: root.id.clone(),
    }
}

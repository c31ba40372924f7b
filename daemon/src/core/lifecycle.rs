//! An agent's life as the core sees it: registered, prepared, started, exited, collected.

use super::handle::Accepted;
use super::prepare::Prepared;
use super::{Core, Msg, Reply};
use crate::db::agents::AgentRow;
use crate::error::Error;
use crate::git::authorship::AgentWork;
use crate::git::collect::{finish, salvage, CollectJob, Collected};
use crate::git::target::{resolve_repo, RepoTarget};
use crate::git::worktree;
use crate::ids::random_hex;
use crate::supervisor::{procfs, watch};
use grove_proto::methods::SpawnParams;
use grove_proto::now_ms;
use grove_proto::shim::{read_exit_record, EXIT_RECORD_FILE};
use grove_proto::types::{AgentRecord, AgentStatus, Removal};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use tokio::sync::oneshot;

/// The first pause before a collect that failed for a passing cause runs again, and
/// the longest it doubles to.
const COLLECT_RETRY_FIRST: Duration = Duration::from_secs(1);
const COLLECT_RETRY_LONGEST: Duration = Duration::from_secs(60);

/// What the spawn handler has worked out before the agent gets an id.
pub struct NewAgent {
    pub params: SpawnParams,
    /// Schema for the agent's own session when it gets one (no `--session`).
    pub schema: Option<grove_state::Schema>,
    /// How to make its worktree ready (`[worktree]` of .grove.toml).
    pub setup: grove_proto::types::WorktreeSetup,
    /// The agent that spawns this one (from the caller's process tree), and its depth.
    pub parent: Option<String>,
    pub depth: u32,
    pub target: RepoTarget,
    pub base_name: String,
    pub base_commit: String,
    /// Where the agent starts, relative to its worktree's root.
    pub subdir: Option<std::path::PathBuf>,
    /// The agent's stdin (input piped into `grove spawn`).
    pub stdin: Option<Vec<u8>>,
    /// The request's idempotency key (scoped to the caller), stored naming the agent.
    pub idempotency_key: Option<String>,
}

/// The file in the agent's directory that holds its input until its shim opens (and
/// unlinks) it.
pub const STDIN_FILE: &str = "stdin";

/// Writes the agent's input to a 0600 file of its own, synced: a queued agent keeps it
/// across a daemon restart.
fn keep_stdin(agent_dir: &std::path::Path, input: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(agent_dir.join(STDIN_FILE))?;
    file.write_all(input)?;
    file.sync_all()
}

impl Core {
    pub(super) async fn spawn(&mut self, new: NewAgent) -> Result<Accepted, Error> {
        if let Some(why) = &self.disk_hold {
            return Err(Error::Refused(why.clone()));
        }
        if let Some(parent) = &new.parent {
            self.check_child_quota(parent)?;
        }
        let env =
            crate::supervisor::environment::spawn_environment(&new.params, &self.config.env_allow);
        let schema = new.schema.clone();
        let own_session = new.params.session.is_none();
        self.pool_note_spawn(&new.target, &new.base_commit);
        let key = new.idempotency_key.clone();
        let record = self.register(new)?;
        let id = record.id.clone();
        if let Some(key) = key {
            self.save_idempotency_key(key, &id);
        }
        if own_session {
            if let Err(e) = self.state.reserve(&record.session, schema).await {
                self.discard(&id).await;
                return Err(e);
            }
        }
        if self.queue.is_empty() && self.can_start(&id) {
            // Kept until the agent runs: a crash during preparation puts it back in the
            // queue, and it must start again with its variables.
            // Queued on the database thread, not awaited: it commits before the
            // `preparing` record that `begin_prepare` persists and waits for.
            if !env.is_empty() {
                self.save_env_soon(&id, &env);
            }
            let (reply, started) = oneshot::channel();
            self.pending_starts.insert(id.clone(), reply);
            self.begin_prepare(&id, env).await;
            return Ok(Accepted {
                record,
                started: Some(started),
            });
        }
        // Only the warm pool holds the slots: the agent starts once one is evicted, and
        // the caller waits for that start as for any other.
        let room_in_pool =
            self.queue.is_empty() && self.disk_hold.is_none() && self.pool_has_evictable();
        self.enqueue(&id);
        self.renumber_queue();
        let saved = match self.persist(&id).await {
            Ok(()) => self.save_env(&id, &env).await,
            // Not "done, saved later": the agent goes, and the error says why.
            Err(Error::Unsaved { source, .. }) => Err(Error::Db(source)),
            Err(e) => Err(e),
        };
        if let Err(e) = saved {
            // Refused whole: a queued agent that a restart would not find is no agent.
            self.queue.retain(|queued| *queued != id);
            self.renumber_queue();
            self.discard(&id).await;
            return Err(e);
        }
        self.pending_env.insert(id.clone(), env);
        if room_in_pool {
            let (reply, started) = oneshot::channel();
            self.pending_starts.insert(id.clone(), reply);
            self.admit_queued().await;
            return Ok(Accepted {
                record,
                started: Some(started),
            });
        }
        let record = self
            .agents
            .get(&id)
            .map(|r| r.record.clone())
            .unwrap_or(record);
        tracing::info!(agent = %id, position = ?record.queue_position, "no free slot: queued");
        self.publish("agent.queued", &record);
        Ok(Accepted {
            record,
            started: None,
        })
    }

    /// The agent a spawn sent again made, answered as the first spawn was: once it runs
    /// (or with the error that ended its preparation) while it is being prepared, as it
    /// is otherwise (queued, running, ended). A preparation already awaited by a client
    /// keeps that client; the retry then gets the record as it is.
    pub(super) fn respawn(&mut self, id: &str) -> Option<Accepted> {
        let record = self.agents.get(id)?.record.clone();
        let awaited = self.pending_starts.contains_key(id);
        if record.status != AgentStatus::Preparing || awaited {
            return Some(Accepted {
                record,
                started: None,
            });
        }
        let (reply, started) = oneshot::channel();
        self.pending_starts.insert(id.to_string(), reply);
        Some(Accepted {
            record,
            started: Some(started),
        })
    }

    /// Refuses a spawn by `parent` beyond its share: live children, and children
    /// waiting in the queue, so that one agent cannot fill the queue for everyone.
    fn check_child_quota(&self, parent: &str) -> Result<(), Error> {
        let children = || {
            self.agents
                .values()
                .filter(move |row| row.record.parent.as_deref() == Some(parent))
                .filter(|row| !row.record.status.is_final())
        };
        let live = children().count();
        if live >= self.config.agent_max_children {
            return Err(Error::Refused(format!(
                "agent {parent} already has {live} live children, the most one agent may \
                 have (agent_max_children); wait for one of them to finish"
            )));
        }
        let queued = children()
            .filter(|row| row.record.status == AgentStatus::Queued)
            .count();
        let would_queue = !self.queue.is_empty() || !self.has_free_slot();
        if would_queue && queued >= self.config.agent_max_queued {
            return Err(Error::Refused(format!(
                "agent {parent} already has {queued} children waiting for a worktree slot, \
                 the most one agent may queue (agent_max_queued); wait for them to start"
            )));
        }
        Ok(())
    }

    /// A new agent id no agent has, its token, and its state directory made.
    pub(super) fn fresh_agent(&self) -> Result<(String, String, std::path::PathBuf), Error> {
        let id = loop {
            let id = random_hex(4).map_err(Error::Randomness)?;
            if !self.agents.contains_key(&id) {
                break id;
            }
        };
        let token = random_hex(16).map_err(Error::Randomness)?;
        let agent_dir = self.config.dirs.agent_dir(&id);
        std::fs::create_dir_all(&agent_dir).map_err(Error::io("create", &agent_dir))?;
        Ok((id, token, agent_dir))
    }

    fn register(&mut self, new: NewAgent) -> Result<AgentRecord, Error> {
        let (id, token, agent_dir) = self.fresh_agent()?;
        if let Some(input) = &new.stdin {
            if let Err(source) = keep_stdin(&agent_dir, input) {
                let _ = std::fs::remove_dir_all(&agent_dir);
                return Err(Error::KeepInput {
                    dir: agent_dir,
                    source,
                });
            }
        }
        let params = new.params;
        let branch = match &params.name {
            Some(name) => format!("grove/{name}-{id}"),
            None => format!("grove/{id}"),
        };
        let record = AgentRecord {
            name: params.name,
            session: params.session.clone().unwrap_or_else(|| id.clone()),
            base_ref: new.base_name,
            base_commit: new.base_commit,
            branch,
            argv: params.argv,
            env_names: params.env.iter().map(|v| v.name.clone()).collect(),
            limits: params.limits,
            timeout_ms: params.timeout_ms,
            keep: params.keep,
            branch_exists: true,
            parent: new.parent,
            depth: new.depth,
            setup: new.setup,
            // Never salvaged, as what setup places is not.
            placed: params.cli_files.clone(),
            sparse: params.sparse.clone(),
            jail: params.jail.unwrap_or(false),
            jail_write: params.jail_write,
            // A preset names what its CLI keeps in $HOME whether jailed or not; only a
            // jail gets a private home to copy it into.
            jail_home: if params.jail == Some(true) {
                params.jail_home
            } else {
                Vec::new()
            },
            tty: params.tty.then(|| params.tty_size.unwrap_or_default()),
            keep_stdin: params.keep_stdin && !params.tty,
            subdir: new.subdir,
            stdin_bytes: new.stdin.as_ref().map(|b| b.len() as u64),
            ..self.new_record(&id, &new.target, &agent_dir)
        };
        Ok(self.admit(record, token))
    }

    /// The record of agent `id` in `target` before anything happened to it: queued now,
    /// with every field its life fills in empty.
    pub(super) fn new_record(
        &self,
        id: &str,
        target: &RepoTarget,
        agent_dir: &Path,
    ) -> AgentRecord {
        AgentRecord {
            id: id.to_string(),
            name: None,
            session: id.to_string(),
            repo: target.workdir.clone(),
            base_ref: String::new(),
            base_commit: String::new(),
            branch: String::new(),
            worktree: self
                .config
                .dirs
                .worktree_root
                .join(&target.dir_name)
                .join(id),
            log_path: agent_dir.join("output.log"),
            argv: Vec::new(),
            env_names: Vec::new(),
            limits: Default::default(),
            timeout_ms: None,
            keep: false,
            status: AgentStatus::Queued,
            outcome: None,
            pid: None,
            created_at_ms: now_ms(),
            started_at_ms: None,
            ended_at_ms: None,
            collected_at_ms: None,
            exit_code: None,
            exit_signal: None,
            head_commit: None,
            files_changed: None,
            insertions: None,
            deletions: None,
            branch_exists: false,
            salvaged: false,
            error: None,
            salvage_error: None,
            tampered: false,
            cloned: false,
            queue_position: None,
            parent: None,
            depth: 0,
            report: None,
            setup: Default::default(),
            placed: Vec::new(),
            attempt: 0,
            sparse: Vec::new(),
            jail: false,
            jail_write: Vec::new(),
            jail_home: Vec::new(),
            cpu_ms: None,
            peak_memory_bytes: None,
            tty: None,
            keep_stdin: false,
            activity: None,
            subdir: None,
            stdin_bytes: None,
            question: None,
            answer: None,
        }
    }

    /// Puts a new agent's record, and the token it proves itself with, in the table.
    pub(super) fn admit(&mut self, record: AgentRecord, token: String) -> AgentRecord {
        self.agents.insert(AgentRow {
            record: record.clone(),
            token,
            pid_start: None,
        });
        record
    }

    /// A preparation finished: the agent runs, or it never will.
    pub(super) async fn prepared(&mut self, id: &str, result: Result<Prepared, Error>) {
        let pooled = self.adopting.remove(id).is_some();
        let waiting = self.pending_starts.remove(id);
        match result {
            Ok(prepared) => {
                if let Some(row) = self.agents.get(id) {
                    crate::metrics::agent_running(row.record.created_at_ms, pooled);
                }
                if let Some(row) = self.agents.get_mut(id) {
                    row.record.cloned = prepared.cloned;
                    let placed = &mut row.record.placed;
                    for path in prepared.placed {
                        if !placed.contains(&path) {
                            placed.push(path);
                        }
                    }
                }
                let started = self.started(id, prepared.pid).await;
                if let Some(reply) = waiting {
                    let _ = reply.send(started);
                }
                // Refill behind the spawn, in case it took a pool worktree.
                if self.queue.is_empty() {
                    self.pool_refill();
                }
            }
            Err(e) => {
                tracing::warn!(agent = id, error = %e, "preparation failed; rolled back");
                match waiting {
                    // The client is still there: it gets the error, and no trace remains.
                    Some(reply) => {
                        self.discard(id).await;
                        let _ = reply.send(Err(e));
                    }
                    // Started from the queue: the id is known to someone, so keep the record.
                    None => {
                        if let Some(row) = self.agents.get_mut(id) {
                            row.record.status = AgentStatus::Cancelled;
                            row.record.error = Some(format!("could not start: {e}"));
                        }
                        self.save(id).await;
                        self.drop_queued_env(id).await;
                        self.notify_finished(id);
                    }
                }
                self.admit_queued().await;
            }
        }
    }

    /// Forgets an agent whose preparation failed (its worktree was already rolled back).
    async fn save_env(&self, id: &str, env: &[(String, String)]) -> Result<(), Error> {
        let (owned, saved) = (id.to_string(), env.to_vec());
        self.db
            .call(move |conn| crate::db::agents::save_queued_env(conn, &owned, &saved))
            .await?;
        Ok(())
    }

    /// Queued on the database thread ahead of the agent's first record: a key found
    /// after a crash names the agent, or an agent that never came to be (then the
    /// retry spawns it).
    fn save_idempotency_key(&self, key: String, id: &str) {
        let answer = serde_json::json!({ "agent": id }).to_string();
        let saving = self
            .db
            .submit(move |conn| crate::db::idempotency::record(conn, &key, "agent.spawn", &answer));
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = saving.await {
                tracing::error!(agent = %id, error = %e, "cannot store the spawn's idempotency key");
            }
        });
    }

    fn save_env_soon(&self, id: &str, env: &[(String, String)]) {
        let (owned, saved) = (id.to_string(), env.to_vec());
        let id = id.to_string();
        let saving = self
            .db
            .submit(move |conn| crate::db::agents::save_queued_env(conn, &owned, &saved));
        tokio::spawn(async move {
            if let Err(e) = saving.await {
                tracing::error!(agent = %id, error = %e, "cannot keep the environment for a restart");
            }
        });
    }

    async fn discard(&mut self, id: &str) {
        if let Some(row) = self.agents.remove(id) {
            // Its own session was made for it alone.
            if row.record.session == row.record.id {
                self.state.drop_unused(&row.record.session).await;
            }
        }
        self.drop_queued_env(id).await;
        let owned = id.to_string();
        if let Err(e) = self
            .db
            .call(move |conn| crate::db::agents::delete(conn, &owned))
            .await
        {
            tracing::error!(agent = id, error = %e, "cannot delete agent record");
        }
        let _ = std::fs::remove_dir_all(self.config.dirs.agent_dir(id));
    }

    async fn started(&mut self, id: &str, pid: u32) -> Result<AgentRecord, Error> {
        let row = self
            .agents
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} vanished while starting")))?;
        row.record.status = AgentStatus::Running;
        row.record.pid = Some(pid);
        row.record.started_at_ms = Some(now_ms());
        row.pid_start = procfs::start_time(pid);
        let record = row.record.clone();
        self.save(id).await;
        // The shim has the environment now. Wiping it (with a WAL checkpoint) is queued
        // on the database thread rather than waited for by the spawning client.
        self.drop_queued_env_soon(id);
        self.watch_shim(id, pid);
        tracing::info!(agent = id, pid, branch = %record.branch, "agent running");
        self.publish("agent.started", &record);
        Ok(record)
    }

    fn watch_shim(&self, id: &str, pid: u32) {
        if self
            .agents
            .get(id)
            .is_some_and(|row| row.record.tty.is_some())
        {
            let (core, agent) = (super::CoreHandle::new(self.tx.clone()), id.to_string());
            crate::console::monitor::start(
                self.config.dirs.clone(),
                id.to_string(),
                move |waiting| {
                    let (core, agent) = (core.clone(), agent.clone());
                    async move { core.activity(&agent, waiting).await }
                },
            );
        }
        let tx = self.tx.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = watch::exited(pid).await {
                tracing::error!(agent = %id, pid, error = %e, "cannot watch shim");
            }
            let _ = tx.send(Msg::ShimExited(id)).await;
        });
    }

    /// The shim is gone: take its exit record (or note that there is none) and collect.
    pub(super) async fn shim_exited(&mut self, id: &str) {
        let exit_path = self.config.dirs.agent_dir(id).join(EXIT_RECORD_FILE);
        // The shim kills the tree and removes the agent's TMPDIR and cgroup; this covers a
        // shim that died first: what it left running is killed before anything is saved.
        match grove_sys::cgroup::kill_stale_cgroup(id) {
            Ok(Some(cgroup)) => {
                tokio::task::spawn_blocking(move || grove_sys::cgroup::remove_when_empty(&cgroup));
            }
            Ok(None) => {
                // No cgroup: the tree went to init with its shim. What still carries
                // the agent's token goes before anything is saved.
                if let Some(token) = self.agents.get(id).map(|row| row.token.clone()) {
                    let killed = tokio::task::spawn_blocking(move || kill_by_token(&token))
                        .await
                        .unwrap_or(0);
                    if killed > 0 {
                        tracing::warn!(
                            agent = id,
                            killed,
                            "killed what the agent's dead shim left running"
                        );
                    }
                }
            }
            Err(e) => {
                tracing::warn!(agent = id, error = %e, "cannot kill what is left in the agent's cgroup")
            }
        }
        // Its TMPDIR goes in the collect task (`start_collect`), off this turn.
        // Its shim unlinks the input once opened; this covers a shim that died first.
        let _ = std::fs::remove_file(self.config.dirs.agent_dir(id).join(STDIN_FILE));
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        if !row.record.status.is_running() {
            // Not collected from here: its TMPDIR goes in a task of its own.
            let tmp = self.config.dirs.agent_dir(id).join("tmp");
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp));
            return;
        }
        let record = &mut row.record;
        match read_exit_record(&exit_path) {
            Ok(Some(exit)) => {
                record.outcome = Some(exit.outcome);
                record.exit_code = exit.exit_code;
                record.exit_signal = exit.exit_signal;
                record.started_at_ms = Some(exit.started_at_ms);
                record.ended_at_ms = Some(exit.ended_at_ms);
                record.error = exit.error;
                record.cpu_ms = exit.cpu_ms;
                record.peak_memory_bytes = exit.peak_memory_bytes;
            }
            Ok(None) => {
                record.ended_at_ms = Some(now_ms());
                record.error = Some("the agent's process vanished without an exit record".into());
            }
            Err(e) => {
                record.ended_at_ms = Some(now_ms());
                record.error = Some(format!(
                    "unreadable exit record {}: {e}",
                    exit_path.display()
                ));
            }
        }
        record.status = AgentStatus::Exited;
        // Nobody is left to hear an answer; its waiting asks end with the agent.
        record.question = None;
        record.activity = None;
        self.askers.remove(id);
        self.withdrawn.remove(id);
        tracing::info!(agent = id, outcome = ?record.outcome, "agent exited");
        let exited = record.clone();
        // The collect runs while the exit is saved: it is reported (`collected`) on a
        // later turn, after this one's save, and one a crash cuts short runs again from
        // the exit record.
        self.start_collect(id, None);
        self.save(id).await;
        self.publish("agent.exited", &exited);
    }

    /// A collect failed for a cause that passes (no space, a busy file): the work is
    /// still only in the worktree, so the agent stays `exited` (not final: `wait` keeps
    /// waiting) and the collect runs again after a pause that doubles up to a minute.
    async fn collect_later(&mut self, id: &str, e: &Error) {
        let why = self.removal_reasons.remove(id);
        let tries = self.collect_retries.entry(id.to_string()).or_default();
        *tries += 1;
        let pause = COLLECT_RETRY_FIRST * 2u32.pow((*tries - 1).min(6));
        let pause = pause.min(COLLECT_RETRY_LONGEST);
        tracing::warn!(agent = id, error = %e, tries = *tries, retry_in_s = pause.as_secs(), "collect failed for now; trying again");
        let note = format!(
            "collect failed for now: {e}; grove tries again in {}s, the work stays in the \
             worktree until then",
            pause.as_secs()
        );
        if let Some(row) = self.agents.get_mut(id) {
            row.record.salvage_error = Some(note.clone());
        }
        self.save(id).await;
        if let Some(reply) = self.pending_removals.remove(id) {
            let _ = reply.send(Err(Error::InvalidState(format!("not removed yet: {note}"))));
        }
        let removal = why.filter(|why| why != "collect" && why != "lost");
        let (tx, id) = (self.tx.clone(), id.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            let _ = tx.send(Msg::RetryCollect(id, removal)).await;
        });
    }

    pub(super) fn retry_collect(&mut self, id: &str, removal: Option<String>) {
        let due = self
            .agents
            .get(id)
            .is_some_and(|row| row.record.status == AgentStatus::Exited);
        if due {
            self.start_collect(id, removal);
        }
    }

    /// Collects the agent in its repository's lane. `removal` overrides `keep` and names
    /// why the worktree goes (rm, prune, disk pressure).
    fn start_collect(&mut self, id: &str, removal: Option<String>) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        let keep = record.keep && removal.is_none();
        // A removal asked for (rm, prune, disk pressure) is answered once the space is
        // free: disk pressure measures again right after.
        let delete_before_reporting = removal.is_some();
        let why = removal.unwrap_or_else(|| match record.outcome {
            Some(_) => "collect".into(),
            None => "lost".into(),
        });
        let job = CollectJob {
            placed: record.placed.clone(),
            agent_id: record.id.clone(),
            worktree: record.worktree.clone(),
            branch: record.branch.clone(),
            base_commit: record.base_commit.clone(),
            keep,
            message: crate::git::authorship::message(&AgentWork {
                id: &record.id,
                name: record.name.as_deref(),
                argv: &record.argv,
                report: record.report.as_deref(),
                removed: (record.status != AgentStatus::Exited).then_some(why.as_str()),
            }),
            author: self.config.commit_author,
            jailed: record.jail,
            sparse: record.sparse.clone(),
            scratch: self.config.dirs.agent_dir(&record.id).join("salvage.git"),
            max_file: self.config.salvage_max_file,
            head_commit: record.head_commit.clone(),
            time_s: record.ended_at_ms.unwrap_or(record.created_at_ms) / 1000,
            code_store: record
                .jail
                .then(|| crate::git::code_store::path(&self.config.dirs.agent_dir(&record.id))),
        };
        self.removal_reasons.insert(id.to_string(), why);
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        let salvages = self.salvages.clone();
        let span = tracing::info_span!("agent", id = %record.id, repo = %record.repo.display());
        let tmp = self.config.dirs.agent_dir(&record.id).join("tmp");
        let ledger = crate::supervisor::cli_trust::ledger_path(&self.config.dirs.state_dir, id);
        let collect = async move {
            // Before the collect is reported: the agent's TMPDIR is gone once it is.
            let removing = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp));
            if let Ok(Err(e)) = removing.await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, "cannot remove the agent's TMPDIR");
                }
            }
            let result = async {
                let repo = record.repo.clone();
                let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await??;
                // Hashing the worktree happens here, outside the repository's lane.
                let common = target.common_dir.clone();
                let (job, staged) = salvages
                    .run(move || {
                        let staged = salvage(&common, &job);
                        (job, staged)
                    })
                    .await?;
                let staged = staged?;
                let mut done = lanes
                    .run(&target, move |lane| finish(lane, &job, staged))
                    .await?;
                let trash = done.trash.take();
                Ok((done, trash))
            }
            .await;
            tracing::debug!(ok = result.is_ok(), "collected");
            let (result, trash) = match result {
                Ok((done, trash)) => (Ok(done), trash),
                Err(e) => (Err(e), None),
            };
            match trash {
                // Asked for to free space: answered once it is free.
                Some(trash) if delete_before_reporting => {
                    let _ = tokio::task::spawn_blocking(move || trash.delete()).await;
                }
                // Off every critical path: the lane goes on with the next collect or
                // preparation at once.
                Some(trash) => lanes.deleter().delete(trash),
                None => {}
            }
            // The CLI's trust entry for the worktree goes with it (none while it is kept).
            let release = move || {
                crate::faults::point("before_trust_release");
                crate::supervisor::cli_trust::release(&ledger)
            };
            let _ = tokio::task::spawn_blocking(release).await;
            let _ = tx.send(Msg::Collected(record.id, result)).await;
        };
        tokio::spawn(tracing::Instrument::instrument(collect, span));
    }

    pub(super) async fn collected(&mut self, id: &str, result: Result<Collected, Error>) {
        self.recovering.remove(id);
        let result = match result {
            Err(e) if e.passes() => return self.collect_later(id, &e).await,
            result => result,
        };
        self.collect_retries.remove(id);
        crate::metrics::collected(&result, |done| done.salvaged);
        let live_index = self.config.dirs.agent_dir(id);
        let _ = std::fs::remove_file(live_index.join(crate::git::LIVE_DIFF_INDEX));
        crate::sessions::code::forget(&live_index);
        let why = self
            .removal_reasons
            .remove(id)
            .unwrap_or_else(|| "collect".into());
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        let record = &mut row.record;
        let max_file = self.config.salvage_max_file;
        let mut removal = None;
        match result {
            Ok(done) => {
                record.head_commit = done.head_commit.clone();
                record.files_changed = Some(done.files_changed);
                record.insertions = Some(done.insertions);
                record.deletions = Some(done.deletions);
                record.branch_exists = done.branch_exists;
                record.salvaged = record.salvaged || done.salvaged;
                let kept = record.worktree.display().to_string();
                record.salvage_error = if let Some(object) = &done.oversized {
                    Some(format!(
                        "its branch holds an object over salvage_max_file ({max_file} bytes): \
                         {object}; nothing of it was brought into your repository. Its own \
                         repository is kept at {kept}: look with `git -C {kept} log`, and \
                         bring it in with `git fetch {kept} {branch}:{branch}` if you want it",
                        branch = record.branch
                    ))
                } else if !done.left_out.is_empty() {
                    Some(format!(
                        "left out {} file(s) over salvage_max_file ({} bytes): {}; \
                         the worktree is kept at {kept}",
                        done.left_out.len(),
                        max_file,
                        done.left_out.join(", ")
                    ))
                } else {
                    None
                };
                if !done.code_brought.is_empty() {
                    crate::sessions::code::tidy_brought_later(
                        self.db.clone(),
                        record.repo.clone(),
                        done.code_brought.clone(),
                    );
                }
                if !done.code_left_out.is_empty() {
                    let note = format!(
                        "checkpoint code kept out of your repository: {}",
                        done.code_left_out.join("; ")
                    );
                    tracing::warn!(agent = id, %note);
                    record.salvage_error = Some(match record.salvage_error.take() {
                        Some(before) => format!("{before}; {note}"),
                        None => note,
                    });
                }
                if let Some(problem) = &done.tampered {
                    tracing::warn!(agent = id, problem = %problem, "the agent changed grove's git layout; worktree kept");
                    record.tampered = true;
                    record.error = Some(format!(
                        "tampered: {problem}; grove did not salvage through it and kept \
                         the worktree at {kept}"
                    ));
                }
                if done.removed {
                    record.keep = false;
                    removal = Some(Removal {
                        at_ms: now_ms(),
                        path: record.worktree.clone(),
                        reason: why,
                        agent_id: Some(record.id.clone()),
                        repo: Some(record.repo.clone()),
                        salvage_ref: done.branch_exists.then(|| record.branch.clone()),
                        salvage_commit: done.head_commit,
                    });
                }
            }
            Err(e) => {
                // The worktree stays where it is: nothing is removed without salvage.
                tracing::error!(agent = id, error = %e, "collect failed; worktree kept");
                let note = format!("collect failed, worktree kept: {e}");
                record.salvage_error = Some(note.clone());
                record.error = Some(with_collect_note(record.error.take(), &note));
            }
        }
        if !record.status.is_final() {
            record.collected_at_ms = Some(now_ms());
            record.status = if record.outcome.is_some() {
                AgentStatus::Collected
            } else {
                crate::metrics::agent_lost();
                AgentStatus::Lost
            };
        }
        let record = record.clone();
        tracing::info!(agent = id, status = %record.status, "agent collected");
        self.save(id).await;
        self.publish("agent.collected", &record);
        if let Some(removal) = removal {
            tracing::info!(path = %removal.path.display(), reason = %removal.reason, "worktree removed");
            self.events.publish(
                "janitor.removed",
                &removal,
                Some(&record.session),
                Some(&record.id),
            );
            let _ = self
                .db
                .call(move |conn| crate::db::removals::record(conn, &removal))
                .await;
        }
        self.notify_finished(id);
        if let Some(reply) = self.pending_removals.remove(id) {
            // `grove rm` and the janitor say "removed" only for what was removed.
            let answer = if record.worktree.exists() {
                Err(Error::InvalidState(format!(
                    "{} was not removed: {}",
                    record.worktree.display(),
                    record
                        .salvage_error
                        .clone()
                        .or_else(|| record.error.clone())
                        .unwrap_or_else(|| "it is kept".into())
                )))
            } else {
                Ok(record)
            };
            let _ = reply.send(answer);
        }
        self.admit_queued().await;
    }

    /// Removes the kept worktree of a finished agent, salvaged first (`grove rm`, prune).
    pub(super) fn remove_kept(&mut self, prefix: &str, reason: String, reply: Reply<AgentRecord>) {
        let record = match self.resolve(prefix) {
            Ok(row) => row.record.clone(),
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if !record.status.is_final() {
            let _ = reply.send(Err(Error::InvalidState(format!(
                "agent {} is {}; kill it first (`grove kill {}`)",
                record.id, record.status, record.id
            ))));
            return;
        }
        if !record.worktree.exists() || self.pending_removals.contains_key(&record.id) {
            let _ = reply.send(Err(Error::InvalidState(format!(
                "agent {} has no worktree left to remove",
                record.id
            ))));
            return;
        }
        self.pending_removals.insert(record.id.clone(), reply);
        self.start_collect(&record.id, Some(reason));
    }

    /// Deletes the records of finished agents; their automatic sessions too when
    /// `sessions` (the caller removes their directories).
    pub(super) async fn forget(
        &mut self,
        ids: Vec<String>,
        sessions: bool,
    ) -> Result<Vec<String>, Error> {
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                self.agents.get(id).is_some_and(|row| {
                    row.record.status.is_final() && !row.record.worktree.exists()
                })
            })
            .collect();
        let ids = self.keep_session_owners(ids);
        let owned = ids.clone();
        self.db
            .call(move |conn| crate::db::agents::delete_many(conn, &owned))
            .await?;
        let mut own_sessions = Vec::new();
        for id in &ids {
            if let Some(row) = self.agents.remove(id) {
                // Its own session, or the one of the agent that spawned it into that
                // agent's own session.
                let record = row.record;
                let own = record.session == record.id
                    || record.parent.as_deref() == Some(record.session.as_str());
                if own && !own_sessions.contains(&record.session) {
                    own_sessions.push(record.session);
                }
            }
        }
        // Their directories go in the janitor, off this turn (janitor/prune.rs).
        if sessions {
            self.forget_own_sessions(own_sessions).await;
        }
        Ok(ids)
    }

    /// Of `ids`, those whose record may go now: an agent whose automatic session an
    /// agent staying on record still uses (a child, a grandchild...) keeps its record
    /// until the last of them goes, because the record is what says the session was
    /// automatic and goes with it.
    fn keep_session_owners(&self, ids: Vec<String>) -> Vec<String> {
        let going: HashSet<&str> = ids.iter().map(String::as_str).collect();
        // One pass over the table, however many records go.
        let still_used: HashSet<&str> = self
            .agents
            .values()
            .filter(|row| !going.contains(row.record.id.as_str()))
            .map(|row| row.record.session.as_str())
            .collect();
        let kept: HashSet<String> = ids
            .iter()
            .filter(|id| still_used.contains(id.as_str()))
            .cloned()
            .collect();
        ids.into_iter().filter(|id| !kept.contains(id)).collect()
    }

    /// The automatic session of an agent goes with its record, once no agent left in
    /// the table uses it (its children write to it too); an audit row says so.
    async fn forget_own_sessions(&mut self, sessions: Vec<String>) {
        for session in sessions {
            if self
                .agents
                .values()
                .any(|row| row.record.session == session)
            {
                continue;
            }
            let reason = "retention: its agent's record was deleted";
            match self
                .state
                .remove(&session, "grove", reason, Vec::new())
                .await
            {
                Ok(_) | Err(Error::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(session = %session, error = %e, "cannot delete an agent's own session at retention")
                }
            }
        }
    }

    /// Start-up: adopt shims that are still alive, collect the ones that ended while
    /// nobody watched, and roll back preparations a crash interrupted.
    pub(super) async fn reconcile(&mut self) {
        let ids: Vec<String> = self.agents.keys().cloned().collect();
        for id in ids {
            let Some(row) = self.agents.get(&id) else {
                continue;
            };
            match row.record.status {
                AgentStatus::Running | AgentStatus::Paused => match (row.record.pid, row.pid_start)
                {
                    (Some(pid), Some(started)) if procfs::is_same_process(pid, started) => {
                        tracing::info!(agent = %id, pid, "adopting running agent");
                        crate::metrics::agent_adopted();
                        if self.recover_paused(&id) {
                            self.save(&id).await;
                        }
                        self.watch_shim(&id, pid);
                    }
                    _ => self.shim_exited(&id).await,
                },
                AgentStatus::Exited => self.start_collect(&id, None),
                AgentStatus::Preparing => self.resolve_interrupted_start(&id).await,
                _ => continue,
            }
            // A collect started here is recovery too, until it reports back.
            if self
                .agents
                .get(&id)
                .is_some_and(|row| row.record.status == AgentStatus::Exited)
            {
                self.recovering.insert(id);
            }
        }
    }

    /// A crash came while this agent was being prepared. If its shim already claimed the
    /// start, the agent runs (or ran): treat it as running. Otherwise give the start up
    /// (the abandon marker stops a shim that is only now starting) and roll back.
    async fn resolve_interrupted_start(&mut self, id: &str) {
        let Some(attempt) = self.agents.get(id).map(|row| row.record.attempt) else {
            return;
        };
        let (claim, abandon) = start_markers(&self.config.dirs.agent_dir(id), attempt);
        let marked = std::fs::write(&abandon, b"");
        let claimed: Option<(u32, u64)> = std::fs::read_to_string(&claim)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| Some((v["pid"].as_u64()? as u32, v["start_time"].as_u64()?)));
        let Some((pid, start_time)) = claimed else {
            match marked {
                Ok(()) => self.roll_back_preparation(id),
                // The agent's directory is gone: no shim can claim a start in it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.roll_back_preparation(id)
                }
                Err(e) => self.abandon_later(id, abandon, e),
            }
            return;
        };
        if let Some(row) = self.agents.get_mut(id) {
            row.record.status = AgentStatus::Running;
            row.record.pid = Some(pid);
            row.record.started_at_ms = Some(now_ms());
            row.pid_start = Some(start_time);
        }
        self.save(id).await;
        if procfs::is_same_process(pid, start_time) {
            tracing::info!(
                agent = id,
                pid,
                "adopting an agent whose start a crash interrupted"
            );
            self.watch_shim(id, pid);
        } else {
            self.shim_exited(id).await;
        }
    }

    /// The abandon marker of an interrupted start could not be written: without it, a
    /// shim of that start that has not claimed it yet could still run the agent in the
    /// worktree a rollback removes, and the agent would then run twice. So no rollback
    /// yet: the marker is written again, with growing pauses, until it can be (the
    /// agent stays `preparing` and counts as recovering), then the start is resolved
    /// afresh ([`Msg::StartAbandoned`]), as a shim may have claimed it meanwhile.
    fn abandon_later(&mut self, id: &str, marker: std::path::PathBuf, first: std::io::Error) {
        tracing::error!(
            agent = id,
            marker = %marker.display(),
            error = %first,
            "cannot mark an interrupted start as given up; its rollback waits until the marker is written"
        );
        self.recovering.insert(id.to_string());
        let (tx, id) = (self.tx.clone(), id.to_string());
        tokio::spawn(async move {
            let mut pause = std::time::Duration::from_millis(100);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
                let path = marker.clone();
                match tokio::task::spawn_blocking(move || std::fs::write(path, b"")).await {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Ok(Err(e)) => {
                        tracing::debug!(agent = %id, error = %e, "the abandon marker still cannot be written")
                    }
                    Err(e) => {
                        tracing::debug!(agent = %id, error = %e, "the abandon marker's write failed")
                    }
                }
            }
            tracing::info!(agent = %id, "interrupted start marked as given up");
            let _ = tx.send(Msg::StartAbandoned(id)).await;
        });
    }

    /// The marker [`Core::abandon_later`] waited for is written: resolve the start again.
    pub(super) async fn start_abandoned(&mut self, id: &str) {
        self.recovering.remove(id);
        if self
            .agents
            .get(id)
            .is_some_and(|row| row.record.status == AgentStatus::Preparing)
        {
            self.resolve_interrupted_start(id).await;
        }
    }

    /// A crash interrupted this agent's preparation: undo it in the background (the
    /// socket answers meanwhile; the agent stays `preparing`, holding its slot), then
    /// [`Core::rolled_back`] puts it back at the head of the queue, so it starts again as
    /// if nothing happened.
    fn roll_back_preparation(&mut self, id: &str) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        tracing::warn!(agent = id, "rolling back an interrupted preparation");
        self.recovering.insert(id.to_string());
        let (lanes, tx, id) = (self.lanes.clone(), self.tx.clone(), id.to_string());
        tokio::spawn(async move {
            crate::faults::hold("rolling_back").await;
            let repo = record.repo.clone();
            let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await;
            if let Ok(Ok(target)) = target {
                let (path, branch) = (record.worktree, record.branch);
                let _ = lanes
                    .run(&target, move |lane| {
                        worktree::rollback(&lane.repo, &path, &branch);
                        Ok(())
                    })
                    .await;
            }
            let _ = tx.send(Msg::RolledBack(id)).await;
        });
    }

    /// An interrupted preparation is undone: the agent goes to the head of the queue
    /// (persisted as position 0, which a restart also puts first).
    pub(super) async fn rolled_back(&mut self, id: &str) {
        self.recovering.remove(id);
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        if row.record.status != AgentStatus::Preparing {
            return;
        }
        row.record.status = AgentStatus::Queued;
        row.record.queue_position = Some(0);
        self.save(id).await;
        self.queue.push_front(id.to_string());
        self.renumber_queue();
        self.admit_queued().await;
    }
}

/// The salvages that may run at once (see `Core::salvages`).
#[derive(Clone)]
pub(super) struct Salvages {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    total: usize,
}

impl Salvages {
    pub(super) fn new(total: usize) -> Salvages {
        let total = total.max(1);
        Salvages {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(total)),
            total,
        }
    }

    /// Runs a salvage once a permit is free. The last of a burst hands the allocator's
    /// free memory back: what the salvages held is free by then, and glibc would keep
    /// it (the daemon stayed at 36 MiB idle after 20 collects on a big repo).
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Error> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let salvages = self.clone();
        let done = tokio::task::spawn_blocking(move || {
            let done = work();
            drop(permit);
            if salvages.permits.available_permits() == salvages.total {
                grove_sys::memory::release_free_heap();
            }
            done
        })
        .await?;
        Ok(done)
    }
}

/// The agent's error with the latest collect failure: a failure of an earlier collect
/// (a disk-pressure pass tries again) is replaced, not repeated, so the error never grows
/// by one identical sentence per pass.
fn with_collect_note(previous: Option<String>, note: &str) -> String {
    const MARK: &str = "collect failed, worktree kept: ";
    match previous {
        None => note.to_string(),
        Some(previous) => match previous.find(MARK) {
            Some(0) => note.to_string(),
            Some(at) => format!("{}; {note}", previous[..at].trim_end_matches("; ")),
            None => format!("{previous}; {note}"),
        },
    }
}

/// The claim and abandon markers of one start attempt (see `ShimSpec::claim`).
pub(super) fn start_markers(
    agent_dir: &std::path::Path,
    attempt: u32,
) -> (std::path::PathBuf, std::path::PathBuf) {
    (
        agent_dir.join(format!("start-{attempt}.claim")),
        agent_dir.join(format!("start-{attempt}.abandon")),
    )
}

/// Kills every process whose environment carries the agent's token, and waits for them
/// to end: the tree of a shim that died without a cgroup (its processes went to init).
/// A process that dropped the token from its environment escapes this; the cgroup
/// (which `--jail` requires) does not let it. Returns how many were killed.
fn kill_by_token(token: &str) -> usize {
    let entry = format!("GROVE_TOKEN={token}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    grove_sys::supervise::kill_marked(entry.as_bytes(), deadline).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot kill what a lost agent left running");
        0
    })
}

#[cfg(test)]
mod tests {
    use super::with_collect_note;

    #[test]
    fn a_repeated_collect_failure_replaces_the_last_one() {
        let note = "collect failed, worktree kept: disk full";
        let once = with_collect_note(Some("exit 1".into()), note);
        assert_eq!(once, "exit 1; collect failed, worktree kept: disk full");
        assert_eq!(with_collect_note(Some(once.clone()), note), once);
        let other = "collect failed, worktree kept: locked";
        assert_eq!(
            with_collect_note(Some(once), other),
            "exit 1; collect failed, worktree kept: locked"
        );
        assert_eq!(with_collect_note(None, note), note);
        assert_eq!(with_collect_note(Some(note.into()), other), other);
    }
}

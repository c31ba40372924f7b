//! How an agent comes to be: a spawn checked against the caps, registered, queued or
//! prepared at once, and answered once it runs (or with what stopped its preparation).

use super::handle::Accepted;
use super::prepare::Prepared;
use super::Core;
use crate::db::agents::AgentRow;
use crate::error::Error;
use crate::git::target::RepoTarget;
use crate::ids::random_hex;
use grove_proto::methods::SpawnParams;
use grove_proto::now_ms;
use grove_proto::types::{AgentRecord, AgentStatus};
use std::path::Path;
use tokio::sync::oneshot;

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
}

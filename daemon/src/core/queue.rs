//! The cap and the queue: at most `max_worktrees` grove worktrees exist at once,
//! counted from the disk; spawns beyond wait here, first in first out, across restarts.

use super::prepare::{prepare, PrepareJob};
use super::{Core, Msg};
use crate::worktree_root::{is_merge_worktree, worktree_dirs};
use grove_proto::types::{AgentRecord, AgentStatus};
use std::collections::HashSet;
use std::path::PathBuf;

impl Core {
    /// Worktree slots in use: directories on disk (warm pool included) plus
    /// preparations and pool fills that have not created theirs yet.
    fn slots_used(&self, on_disk: &HashSet<PathBuf>) -> usize {
        let preparing = self
            .agents
            .values()
            .filter(|row| row.record.status == AgentStatus::Preparing)
            .filter(|row| !on_disk.contains(&row.record.worktree))
            // Its warm-pool worktree is on disk until it moves to the agent's path.
            .filter(|row| !self.adopting.contains_key(&row.record.id))
            .count();
        on_disk.len() + preparing + self.pool_slots_not_on_disk(on_disk)
    }

    /// The worktree directories on disk, read again only after a message that reports
    /// one made or removed (`Msg::changes_worktrees`).
    pub(super) fn worktrees_on_disk(&self) -> &HashSet<PathBuf> {
        let listing = self.worktree_listing.get_or_init(|| {
            worktree_dirs(&self.config.dirs.worktree_root)
                .into_iter()
                .filter(|dir| !is_merge_worktree(dir))
                .collect()
        });
        crate::faults::check_worktree_listing(&self.config.dirs.worktree_root, listing, |dir| {
            self.accounts_for(dir)
        });
        listing
    }

    /// Whether a directory missing from the listing is counted anyway: the worktree of
    /// a preparation, a pool fill or a restore (whose record is `collected` from the
    /// start) that has not reported yet.
    fn accounts_for(&self, dir: &std::path::Path) -> bool {
        self.agents.values().any(|row| {
            row.record.worktree == dir
                && matches!(
                    row.record.status,
                    AgentStatus::Preparing | AgentStatus::Collected
                )
        }) || self.pool_holds(dir)
    }

    /// Whether `id` can start now: a free slot, or a warm-pool worktree of its own.
    pub(super) fn can_start(&self, id: &str) -> bool {
        self.can_start_with(id, self.worktrees_on_disk())
    }

    /// [`Self::can_start`] with the worktree root read once by the caller. A listing
    /// older than this turn only over-counts (a directory removed since), never
    /// under-counts: an agent whose directory appeared since is counted as preparing.
    fn can_start_with(&self, id: &str, on_disk: &HashSet<PathBuf>) -> bool {
        self.has_free_slot_with(on_disk)
            || self
                .agents
                .get(id)
                .is_some_and(|row| self.pool_has_ready(&row.record))
    }

    pub(super) fn has_free_slot(&self) -> bool {
        self.has_free_slot_with(self.worktrees_on_disk())
    }

    pub(super) fn has_free_slot_with(&self, on_disk: &HashSet<PathBuf>) -> bool {
        self.disk_hold.is_none() && self.slots_used(on_disk) < self.config.max_worktrees
    }

    /// Queues `id`: the user's spawns go ahead of every agent's, in the order of
    /// arrival within each, so that the user's next spawn never waits behind children
    /// an agent queued.
    pub(super) fn enqueue(&mut self, id: &str) {
        let by_agent = |agents: &super::table::AgentTable, id: &str| {
            agents
                .get(id)
                .is_some_and(|row| row.record.parent.is_some())
        };
        let at = if by_agent(&self.agents, id) {
            self.queue.len()
        } else {
            self.queue
                .iter()
                .position(|queued| by_agent(&self.agents, queued))
                .unwrap_or(self.queue.len())
        };
        self.queue.insert(at, id.to_string());
    }

    /// Rebuilds the queue from the records after a restart, in the order [`enqueue`]
    /// keeps (the user's spawns first, then agents', each in the order of arrival),
    /// behind the starts a crash interrupted (position 0), which go first.
    pub(super) fn restore_queue(&mut self) {
        let mut queued: Vec<&AgentRecord> = self
            .agents
            .values()
            .map(|row| &row.record)
            .filter(|r| r.status == AgentStatus::Queued)
            .collect();
        let key = |r: &AgentRecord| {
            (
                r.queue_position != Some(0),
                r.parent.is_some(),
                r.created_at_ms,
                r.id.clone(),
            )
        };
        queued.sort_by_key(|r| key(r));
        self.queue = queued.into_iter().map(|r| r.id.clone()).collect();
        self.renumber_queue();
    }

    pub(super) fn renumber_queue(&mut self) {
        for (index, id) in self.queue.iter().enumerate() {
            if let Some(row) = self.agents.get_mut(id) {
                row.record.queue_position = Some(index as u64 + 1);
            }
        }
    }

    pub(super) fn queued_records(&self) -> Vec<AgentRecord> {
        self.queue
            .iter()
            .filter_map(|id| self.agents.get(id).map(|row| row.record.clone()))
            .collect()
    }

    /// Starts queued agents while slots are free; makes room by evicting the warm pool
    /// when agents still wait; refills the pool when nobody does.
    pub(super) async fn admit_queued(&mut self) {
        let on_disk = if self.queue.is_empty() {
            HashSet::new()
        } else {
            self.worktrees_on_disk().clone()
        };
        let mut starting = Vec::new();
        while let Some(front) = self.queue.front() {
            if !self.can_start_with(front, &on_disk) {
                break;
            }
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let env = match self.queued_env(&id).await {
                Ok(Some(env)) => env,
                Ok(None) => continue,
                // Not a reason to cancel it: it stays first, and the next pass (a slot
                // freed, a spawn) tries again.
                Err(e) => {
                    tracing::error!(agent = %id, error = %e, "cannot read a queued agent's environment; it stays queued");
                    self.queue.push_front(id);
                    break;
                }
            };
            tracing::info!(agent = %id, "slot free: starting queued agent");
            if let Some(job) = self.mark_preparing(&id, env) {
                starting.push((id, job));
            }
        }
        // In memory only: the order on disk is each row's arrival (`restore_queue`
        // rebuilds positions from it), so a start re-saves no other queued row.
        self.renumber_queue();
        // One transaction (one fsync) for the pass, before any preparation begins: a
        // crash then finds each started agent `preparing` and rolls back what it made.
        let ids: Vec<&str> = starting.iter().map(|(id, _)| id.as_str()).collect();
        self.save_all(&ids).await;
        for (id, job) in starting {
            self.launch_prepare(id, job);
        }
        if self.queue.is_empty() {
            self.pool_refill();
        } else if self.disk_hold.is_none() {
            self.pool_make_room(self.queue.len());
        }
    }

    /// Moves an agent to `preparing` and starts the preparation task once that is saved.
    pub(super) async fn begin_prepare(&mut self, id: &str, env: Vec<(String, String)>) {
        if let Some(job) = self.mark_preparing(id, env) {
            self.save(id).await;
            self.launch_prepare(id.to_string(), job);
        }
    }

    /// Moves an agent to `preparing` in memory and makes its preparation job; the
    /// record must be saved before the job is launched.
    fn mark_preparing(&mut self, id: &str, env: Vec<(String, String)>) -> Option<PrepareJob> {
        let row = self.agents.get_mut(id)?;
        row.record.status = AgentStatus::Preparing;
        if row.record.queue_position.take().is_some() {
            crate::metrics::left_queue(row.record.created_at_ms);
        }
        row.record.attempt += 1;
        let record = row.record.clone();
        let token = row.token.clone();
        // A jailed agent's pool worktree becomes a repository of its own when it is
        // taken (`own_repo::adopt_pooled`).
        let pooled = self.pool_take(&record);
        if let Some(taken) = &pooled {
            self.adopting.insert(id.to_string(), taken.path.clone());
        }
        Some(PrepareJob {
            pooled,
            record,
            token,
            env,
            exe: self.exe.clone(),
            config: self.config.clone(),
        })
    }

    /// Runs a preparation as a task that reports back to the core.
    fn launch_prepare(&self, id: String, job: PrepareJob) {
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        let span = tracing::info_span!("agent", id = %id, repo = %job.record.repo.display());
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let result = prepare(lanes, job).await;
                tracing::debug!(ok = result.is_ok(), "prepared");
                let _ = tx.send(Msg::Prepared(id, result)).await;
            },
            span,
        ));
    }

    /// The environment a queued agent was spawned with. An agent whose variables were
    /// not kept (a crash interrupted its first preparation) is cancelled rather than
    /// started without them.
    /// A database that cannot be read is an error, never "not kept".
    async fn queued_env(
        &mut self,
        id: &str,
    ) -> Result<Option<Vec<(String, String)>>, crate::error::Error> {
        if let Some(env) = self.pending_env.remove(id) {
            return Ok(Some(env));
        }
        let owned = id.to_string();
        let saved = self
            .db
            .call(move |conn| crate::db::agents::load_queued_env(conn, &owned))
            .await?;
        let needs_env = self
            .agents
            .get(id)
            .is_some_and(|row| !row.record.env_names.is_empty());
        match saved {
            Some(env) => Ok(Some(env)),
            // An agent queued by an older grove, which saved nothing without --env.
            None if !needs_env => Ok(Some(crate::supervisor::environment::minimal_environment())),
            None => {
                if let Some(row) = self.agents.get_mut(id) {
                    row.record.status = AgentStatus::Cancelled;
                    row.record.error = Some(
                        "its start was interrupted and its --env values were not kept; \
                         spawn it again"
                            .into(),
                    );
                }
                self.save(id).await;
                self.notify_finished(id);
                Ok(None)
            }
        }
    }

    pub(super) async fn drop_queued_env(&self, id: &str) {
        // The agent will not start: its input goes with its environment.
        let _ = std::fs::remove_file(
            self.config
                .dirs
                .agent_dir(id)
                .join(super::spawn::STDIN_FILE),
        );
        let owned = id.to_string();
        let _ = self
            .db
            .call(move |conn| crate::db::agents::drop_queued_env(conn, &owned))
            .await;
    }

    /// Like [`Self::drop_queued_env`], queued on the database thread without waiting.
    pub(super) fn drop_queued_env_soon(&self, id: &str) {
        let owned = id.to_string();
        let id = id.to_string();
        let dropping = self
            .db
            .submit(move |conn| crate::db::agents::drop_queued_env(conn, &owned));
        tokio::spawn(async move {
            if let Err(e) = dropping.await {
                tracing::error!(agent = %id, error = %e, "cannot delete a started agent's environment");
            }
        });
    }

    /// Takes a queued agent out of the queue for good.
    pub(super) async fn cancel_queued(&mut self, id: &str) -> Option<AgentRecord> {
        let position = self.queue.iter().position(|q| q == id)?;
        self.queue.remove(position);
        self.pending_env.remove(id);
        let row = self.agents.get_mut(id)?;
        row.record.status = AgentStatus::Cancelled;
        row.record.queue_position = None;
        row.record.error = Some("cancelled while queued".into());
        let record = row.record.clone();
        self.drop_queued_env(id).await;
        self.save(id).await;
        self.renumber_queue();
        self.notify_finished(id);
        Some(record)
    }
}

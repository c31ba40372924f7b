//! An agent's life as the core sees it: registered, started, exited, collected.

use super::{Core, Msg};
use crate::db::agents::AgentRow;
use crate::error::Error;
use crate::git::collect::{collect, CollectJob, Collected};
use crate::git::target::{resolve_repo, RepoTarget};
use crate::git::worktree;
use crate::ids::random_hex;
use crate::supervisor::{procfs, watch};
use grove_agent_shim::{now_ms, read_exit_record, EXIT_RECORD_FILE};
use grove_proto::methods::SpawnParams;
use grove_proto::types::{AgentRecord, AgentStatus};

/// What the spawn handler has worked out before the agent gets an id.
pub struct NewAgent {
    pub params: SpawnParams,
    pub target: RepoTarget,
    pub base_name: String,
    pub base_commit: String,
}

impl Core {
    pub(super) async fn register(&mut self, new: NewAgent) -> Result<(AgentRecord, String), Error> {
        let id = loop {
            let id = random_hex(4).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
            if !self.agents.contains_key(&id) {
                break id;
            }
        };
        let token = random_hex(16).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        let dirs = &self.config.dirs;
        let agent_dir = dirs.agent_dir(&id);
        std::fs::create_dir_all(&agent_dir)
            .map_err(|e| Error::Internal(format!("cannot create {}: {e}", agent_dir.display())))?;
        let params = new.params;
        let branch = match &params.name {
            Some(name) => format!("grove/{name}-{id}"),
            None => format!("grove/{id}"),
        };
        let record = AgentRecord {
            session: params.session.clone().unwrap_or_else(|| id.clone()),
            repo: new.target.workdir.clone(),
            base_ref: new.base_name,
            base_commit: new.base_commit,
            branch,
            worktree: dirs.worktree_root.join(&new.target.dir_name).join(&id),
            log_path: agent_dir.join("output.log"),
            argv: params.argv,
            env_names: params.env.iter().map(|v| v.name.clone()).collect(),
            limits: params.limits,
            timeout_ms: params.timeout_ms,
            keep: params.keep,
            status: AgentStatus::Preparing,
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
            branch_exists: true,
            salvaged: false,
            error: None,
            name: params.name,
            id: id.clone(),
        };
        self.agents.insert(
            id.clone(),
            AgentRow {
                record: record.clone(),
                token: token.clone(),
                pid_start: None,
            },
        );
        self.persist(&id).await;
        Ok((record, token))
    }

    /// Forgets an agent whose preparation failed (its worktree was already rolled back).
    pub(super) async fn discard(&mut self, id: &str) {
        self.agents.remove(id);
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

    pub(super) async fn started(&mut self, id: &str, pid: u32) -> Result<AgentRecord, Error> {
        let row = self
            .agents
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} vanished while starting")))?;
        row.record.status = AgentStatus::Running;
        row.record.pid = Some(pid);
        row.record.started_at_ms = Some(now_ms());
        row.pid_start = procfs::start_time(pid);
        let record = row.record.clone();
        self.persist(id).await;
        self.watch_shim(id, pid);
        tracing::info!(agent = id, pid, branch = %record.branch, "agent running");
        Ok(record)
    }

    fn watch_shim(&self, id: &str, pid: u32) {
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
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        if row.record.status != AgentStatus::Running {
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
        tracing::info!(agent = id, outcome = ?record.outcome, "agent exited");
        self.persist(id).await;
        self.start_collect(id);
    }

    fn start_collect(&self, id: &str) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        let job = CollectJob {
            agent_id: record.id.clone(),
            worktree: record.worktree.clone(),
            branch: record.branch.clone(),
            base_commit: record.base_commit.clone(),
            keep: record.keep,
            reason: match record.outcome {
                Some(outcome) => format!("ended ({})", outcome.as_str()),
                None => "was lost".into(),
            },
        };
        tokio::spawn(async move {
            let result = async {
                let repo = record.repo.clone();
                let target = tokio::task::spawn_blocking(move || resolve_repo(&repo))
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))??;
                lanes.run(&target, move |lane| collect(lane, &job)).await
            }
            .await;
            let _ = tx.send(Msg::Collected(record.id, result)).await;
        });
    }

    pub(super) async fn collected(&mut self, id: &str, result: Result<Collected, Error>) {
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        let record = &mut row.record;
        match result {
            Ok(done) => {
                record.head_commit = done.head_commit;
                record.files_changed = Some(done.files_changed);
                record.insertions = Some(done.insertions);
                record.deletions = Some(done.deletions);
                record.branch_exists = done.branch_exists;
                record.salvaged = done.salvaged;
            }
            Err(e) => {
                // The worktree stays where it is: nothing is removed without salvage.
                tracing::error!(agent = id, error = %e, "collect failed; worktree kept");
                let note = format!("collect failed, worktree kept: {e}");
                record.error = Some(match record.error.take() {
                    Some(previous) => format!("{previous}; {note}"),
                    None => note,
                });
            }
        }
        record.collected_at_ms = Some(now_ms());
        record.status = if record.outcome.is_some() {
            AgentStatus::Collected
        } else {
            AgentStatus::Lost
        };
        tracing::info!(agent = id, status = %record.status, "agent collected");
        self.persist(id).await;
        self.notify_finished(id);
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
                AgentStatus::Running => match (row.record.pid, row.pid_start) {
                    (Some(pid), Some(started)) if procfs::is_same_process(pid, started) => {
                        tracing::info!(agent = %id, pid, "adopting running agent");
                        self.watch_shim(&id, pid);
                    }
                    _ => self.shim_exited(&id).await,
                },
                AgentStatus::Exited => self.start_collect(&id),
                AgentStatus::Preparing => self.roll_back_preparation(&id).await,
                _ => {}
            }
        }
    }

    async fn roll_back_preparation(&mut self, id: &str) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        tracing::warn!(agent = id, "rolling back an interrupted preparation");
        let repo = record.repo.clone();
        let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await;
        if let Ok(Ok(target)) = target {
            let path = record.worktree.clone();
            let branch = record.branch.clone();
            let _ = self
                .lanes
                .run(&target, move |lane| {
                    worktree::rollback(&lane.repo, &path, &branch);
                    Ok(())
                })
                .await;
        }
        self.discard(id).await;
    }
}

//! A start-up's reconciliation: shims still alive are adopted, the ones that ended
//! while nobody watched are collected, and preparations a crash interrupted are rolled
//! back and queued again, all in the background after the socket opened.

use super::{Core, Msg};
use crate::git::target::resolve_repo;
use crate::git::worktree;
use crate::supervisor::procfs;
use grove_proto::now_ms;
use grove_proto::types::AgentStatus;

impl Core {
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
        let (claim, abandon) =
            super::lifecycle::start_markers(&self.config.dirs.agent_dir(id), attempt);
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

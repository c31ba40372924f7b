//! Looking agents up, waiting for them and stopping them.

use super::table::UnknownStart;
use super::{Core, ListPage, Listed};
use crate::db::agents::AgentRow;
use crate::error::Error;
use crate::supervisor::procfs;
use grove_proto::state::SessionAgent;
use grove_proto::types::{AgentRecord, AgentStatus};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Core {
    /// Finds the one agent whose id starts with `prefix`.
    pub(super) fn resolve(&self, prefix: &str) -> Result<&AgentRow, Error> {
        self.resolve_for(prefix, None)
    }

    /// [`Core::resolve`] among what `viewer` may see (itself and its descendants);
    /// `None`: everything.
    pub(super) fn resolve_for(
        &self,
        prefix: &str,
        viewer: Option<&str>,
    ) -> Result<&AgentRow, Error> {
        let visible = viewer.map(|me| {
            let mut mine = self.descendants(me);
            mine.insert(me.to_string());
            mine
        });
        let sees = |id: &str| visible.as_ref().is_none_or(|v| v.contains(id));
        let prefix = prefix.trim();
        if prefix.is_empty() {
            return Err(Error::BadInput(
                "empty agent id; give an id or a unique prefix".into(),
            ));
        }
        if let Some(row) = self.agents.get(prefix).filter(|row| sees(&row.record.id)) {
            return Ok(row);
        }
        // A name works wherever an id does, when one known agent has it.
        let mut named: Vec<&AgentRow> = self
            .agents
            .values()
            .filter(|row| row.record.name.as_deref() == Some(prefix) && sees(&row.record.id))
            .collect();
        match named.len() {
            0 => {}
            1 => return Ok(named.remove(0)),
            n => {
                let mut ids: Vec<&str> = named.iter().map(|row| row.record.id.as_str()).collect();
                ids.sort_unstable();
                return Err(Error::Ambiguous(format!(
                    "{n} agents are named `{prefix}` ({}); give one's id",
                    ids.join(", ")
                )));
            }
        }
        let mut matches: Vec<&AgentRow> = self
            .agents
            .values()
            .filter(|row| row.record.id.starts_with(prefix) && sees(&row.record.id))
            .collect();
        match matches.len() {
            0 => Err(Error::NotFound(format!(
                "no agent has an id starting with `{prefix}` or that name; `grove list --all` shows every agent"
            ))),
            1 => Ok(matches.remove(0)),
            n => {
                let mut ids: Vec<&str> = matches.iter().map(|row| row.record.id.as_str()).collect();
                ids.sort_unstable();
                Err(Error::Ambiguous(format!(
                    "`{prefix}` matches {n} agents ({}); give more characters",
                    ids.join(", ")
                )))
            }
        }
    }

    /// A page of records ready to list, oldest first: at most `limit`, starting after
    /// the agent `after`; inside an agent (`within`), only the agents it spawned.
    pub(super) fn list(&mut self, page: ListPage) -> Result<Vec<Arc<Listed>>, Error> {
        let descendants = page.within.as_deref().map(|me| self.descendants(me));
        let visible = |id: &str| descendants.as_ref().is_none_or(|d| d.contains(id));
        self.agents
            .page(page.all, page.after.as_deref(), page.limit, visible)
            .map_err(|UnknownStart| {
                let after = page.after.as_deref().unwrap_or_default();
                Error::BadInput(format!(
                    "`after` names agent `{after}`, which is not in this list; start again \
                     without `after`"
                ))
            })
    }

    /// The agents of session `name`, oldest first.
    pub(super) fn session_agents(&self, name: &str) -> Vec<SessionAgent> {
        let mut members: Vec<&AgentRecord> = self
            .agents
            .values()
            .map(|row| &row.record)
            .filter(|record| record.session == name)
            .collect();
        members.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        members
            .into_iter()
            .map(|record| SessionAgent {
                id: record.id.clone(),
                status: record.status_text(),
            })
            .collect()
    }

    /// The agents `ancestor` spawned, directly or not (not itself).
    pub(super) fn descendants(&self, ancestor: &str) -> HashSet<String> {
        let mut found = HashSet::new();
        let mut parents = vec![ancestor.to_string()];
        while let Some(parent) = parents.pop() {
            for row in self.agents.values() {
                if row.record.parent.as_deref() == Some(parent.as_str())
                    && found.insert(row.record.id.clone())
                {
                    parents.push(row.record.id.clone());
                }
            }
        }
        found
    }

    pub(super) fn wait(&mut self, prefix: &str) -> Result<oneshot::Receiver<AgentRecord>, Error> {
        let record = self.resolve(prefix)?.record.clone();
        let (tx, rx) = oneshot::channel();
        if record.status.is_final() {
            let _ = tx.send(record);
        } else {
            self.waiters.entry(record.id).or_default().push(tx);
        }
        Ok(rx)
    }

    /// Wakes everyone waiting for `id`.
    pub(super) fn notify_finished(&mut self, id: &str) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        for waiter in self.waiters.remove(id).unwrap_or_default() {
            let _ = waiter.send(record.clone());
        }
    }

    /// Cancels a queued agent, or asks a running agent's shim to stop the tree:
    /// SIGTERM now, SIGKILL after the grace period.
    pub(super) async fn kill(&mut self, prefix: &str) -> Result<AgentRecord, Error> {
        let id = self.resolve(prefix)?.record.id.clone();
        let killed = self.kill_one(&id).await?;
        self.kill_descendants(&id).await;
        Ok(killed)
    }

    /// Agents spawned by an agent die with it (queued ones are cancelled).
    async fn kill_descendants(&mut self, id: &str) {
        let mut parents = vec![id.to_string()];
        while let Some(parent) = parents.pop() {
            let children: Vec<String> = self
                .agents
                .values()
                .filter(|row| row.record.parent.as_deref() == Some(parent.as_str()))
                .filter(|row| !row.record.status.is_final())
                .map(|row| row.record.id.clone())
                .collect();
            for child in children {
                if let Err(e) = self.kill_one(&child).await {
                    tracing::warn!(agent = %child, error = %e, "could not stop a child agent");
                }
                parents.push(child);
            }
        }
    }

    async fn kill_one(&mut self, id: &str) -> Result<AgentRecord, Error> {
        let row = self.resolve(id)?;
        let id = row.record.id.clone();
        match row.record.status {
            // Paused, or being paused: thawed in the background. Killed anyway when
            // thawing fails: the shim's cgroup.kill after the grace period ends even a
            // frozen tree.
            AgentStatus::Running | AgentStatus::Paused => self.thaw_for_kill(&id),
            AgentStatus::Queued => {
                return self
                    .cancel_queued(&id)
                    .await
                    .ok_or_else(|| Error::Inconsistent {
                        id: id.clone(),
                        what: "is queued but not in the queue",
                    })
            }
            AgentStatus::Preparing => {
                return Err(Error::InvalidState(format!(
                    "agent {id} is still being prepared; try again in a moment"
                )))
            }
            _ => {
                return Err(Error::InvalidState(format!(
                    "agent {id} has already finished ({})",
                    row.record.status_text()
                )))
            }
        }
        self.signal_stop(&id)
    }

    /// SIGTERM to the agent's shim, which stops the tree.
    fn signal_stop(&self, id: &str) -> Result<AgentRecord, Error> {
        let row = self.resolve(id)?;
        let (Some(pid), Some(started)) = (row.record.pid, row.pid_start) else {
            return Err(Error::Inconsistent {
                id: id.to_string(),
                what: "has no recorded process",
            });
        };
        // Never signal a pid that now belongs to someone else.
        if procfs::is_same_process(pid, started) {
            kill(Pid::from_raw(pid as i32), Signal::SIGTERM).map_err(|source| Error::Signal {
                id: id.to_string(),
                pid,
                source,
            })?;
        }
        Ok(row.record.clone())
    }
}

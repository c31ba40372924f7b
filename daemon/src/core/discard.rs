//! What becomes of an agent's branch: `grove discard` deletes it in its repository's
//! lane, its tip kept under a salvage ref; `grove merge` (git in the user's process)
//! reports what it merged. Either way the record is told.

use super::{Core, Msg, Reply};
use crate::error::Error;
use crate::git::refs::{self, Discard};
use crate::git::target::resolve_repo;
use grove_proto::methods::{DiscardResult, MergedParams};
use grove_proto::types::AgentRecord;

impl Core {
    /// Checks what the table knows, then deletes the branch in the lane; `discarded`
    /// updates the record and answers.
    pub(super) fn discard_branch(&mut self, prefix: &str, reply: Reply<DiscardResult>) {
        let record = match self.resolve(prefix) {
            Ok(row) => row.record.clone(),
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if let Err(e) = self.may_discard(&record) {
            let _ = reply.send(Err(e));
            return;
        }
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let repo = record.repo.clone();
            let result = match tokio::task::spawn_blocking(move || resolve_repo(&repo)).await {
                Ok(Ok(target)) => {
                    let (id, branch) = (record.id.clone(), record.branch.clone());
                    lanes
                        .run(&target, move |lane| refs::discard(lane, &id, &branch))
                        .await
                }
                Ok(Err(e)) => Err(e),
                Err(e) => Err(e.into()),
            };
            let _ = tx.send(Msg::Discarded(record.id, result, reply)).await;
        });
    }

    fn may_discard(&self, record: &grove_proto::types::AgentRecord) -> Result<(), Error> {
        let id = &record.id;
        if !record.status.is_final() {
            return Err(Error::InvalidState(format!(
                "agent {id} is still {}; stop it first with `grove kill {id}`",
                record.status
            )));
        }
        if !record.branch_exists || record.branch.is_empty() {
            return Err(no_branch(id));
        }
        if record.worktree.exists() || self.pending_removals.contains_key(id) {
            return Err(Error::InvalidState(format!(
                "{} is checked out in {}; remove that worktree first (`grove rm {id}` for a \
                 kept one)",
                record.branch,
                record.worktree.display()
            )));
        }
        Ok(())
    }

    pub(super) async fn branch_discarded(
        &mut self,
        id: &str,
        result: Result<Discard, Error>,
        reply: Reply<DiscardResult>,
    ) {
        let answer = match result {
            Ok(Discard::Done {
                commit,
                salvage_ref,
            }) => self.branch_gone(id).await.map(|branch| DiscardResult {
                id: id.to_string(),
                branch,
                commit,
                salvage_ref,
            }),
            // Deleted behind grove's back (git, another discard): the record learns it.
            Ok(Discard::Gone) => {
                let _ = self.branch_gone(id).await;
                Err(no_branch(id))
            }
            Err(e) => Err(e),
        };
        let _ = reply.send(answer);
    }

    /// Records that the agent's branch no longer exists; its name.
    async fn branch_gone(&mut self, id: &str) -> Result<String, Error> {
        let record = self.mark_branch_gone(id).await?;
        tracing::info!(agent = id, branch = %record.branch, "branch discarded");
        self.publish("agent.discarded", &record);
        Ok(record.branch)
    }

    async fn mark_branch_gone(&mut self, id: &str) -> Result<AgentRecord, Error> {
        let row = self
            .agents
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} was forgotten meanwhile")))?;
        row.record.branch_exists = false;
        let record = row.record.clone();
        self.persist(id).await?;
        Ok(record)
    }

    /// `grove merge` merged the agent's branch (and with `--delete` deleted it): logged,
    /// published as `agent.merged` (the record, and what went where under `merged`).
    pub(super) async fn merged(&mut self, merged: MergedParams) -> Result<AgentRecord, Error> {
        let id = self.resolve(&merged.id)?.record.id.clone();
        let record = if merged.deleted {
            self.mark_branch_gone(&id).await?
        } else {
            self.resolve(&id)?.record.clone()
        };
        tracing::info!(
            agent = %id,
            target = %merged.target,
            mode = %merged.mode,
            tip = %merged.tip,
            commit = ?merged.commit,
            deleted = merged.deleted,
            "merged by grove merge"
        );
        let mut params = serde_json::to_value(&record).map_err(|source| Error::Encode {
            what: "the record",
            source,
        })?;
        params["merged"] = serde_json::json!({
            "target": merged.target,
            "mode": merged.mode,
            "tip": merged.tip,
            "commit": merged.commit,
            "deleted": merged.deleted,
        });
        self.events
            .publish("agent.merged", &params, Some(&record.session), Some(&id));
        Ok(record)
    }
}

fn no_branch(id: &str) -> Error {
    Error::InvalidState(format!(
        "agent {id} has no branch to discard (it left no commits, or the branch is gone)"
    ))
}

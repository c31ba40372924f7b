//! `grove restore`: a salvage ref checked out again under grove's worktree root and
//! tracked like a kept agent worktree, so that `list`, `diff`, `merge`, `rm` and the
//! janitor (which salvages before it removes) know it.

use super::{Core, Msg, Reply};
use crate::error::Error;
use crate::git::refs::{self, Restored};
use crate::git::target::RepoTarget;
use grove_proto::now_ms;
use grove_proto::types::{AgentRecord, AgentStatus};

impl Core {
    /// Registers a record for the restored worktree, then checks it out in the
    /// repository's lane; `restored` finishes (or forgets) the record.
    pub(super) fn restore(
        &mut self,
        target: RepoTarget,
        reference: String,
        reply: Reply<AgentRecord>,
    ) {
        let record = match self.register_restore(&target, &reference) {
            Ok(record) => record,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        let workers = self.config.checkout_workers;
        let path = record.worktree.clone();
        tokio::spawn(async move {
            let result = lanes
                .run(&target, move |lane| {
                    refs::restore(lane, &reference, &path, workers)
                })
                .await;
            let _ = tx.send(Msg::Restored(record.id, result, reply)).await;
        });
    }

    /// A record in the table (not yet in the database: a crash before the checkout
    /// is done leaves at most a worktree the start-up scan salvages as an orphan).
    fn register_restore(
        &mut self,
        target: &RepoTarget,
        reference: &str,
    ) -> Result<AgentRecord, Error> {
        let (id, token, agent_dir) = self.fresh_agent()?;
        let now = now_ms();
        let record = AgentRecord {
            argv: vec!["grove".into(), "restore".into(), reference.into()],
            keep: true,
            status: AgentStatus::Collected,
            created_at_ms: now,
            ended_at_ms: Some(now),
            collected_at_ms: Some(now),
            ..self.new_record(&id, target, &agent_dir)
        };
        Ok(self.admit(record, token))
    }

    pub(super) async fn restored(
        &mut self,
        id: &str,
        result: Result<Restored, Error>,
        reply: Reply<AgentRecord>,
    ) {
        let restored = match result {
            Ok(restored) => restored,
            Err(e) => {
                self.agents.remove(id);
                let _ = std::fs::remove_dir_all(self.config.dirs.agent_dir(id));
                let _ = reply.send(Err(e));
                return;
            }
        };
        let Some(row) = self.agents.get_mut(id) else {
            let _ = reply.send(Err(Error::Inconsistent {
                id: id.to_string(),
                what: "vanished while it was being restored",
            }));
            return;
        };
        let record = &mut row.record;
        record.branch = restored.branch;
        record.base_ref = restored.base_ref;
        record.base_commit = restored.base_commit;
        record.head_commit = Some(restored.commit);
        record.branch_exists = true;
        let note = format!(
            "grove restore {}: checked out on branch {} in {}\n",
            record.argv[2],
            record.branch,
            record.worktree.display()
        );
        // A fresh log: its older half, if any, is another life's.
        let _ = std::fs::remove_file(grove_proto::agent_log::old_path(&record.log_path));
        if let Err(e) = std::fs::write(&record.log_path, note) {
            tracing::warn!(agent = id, error = %e, "cannot write the restored worktree's log");
        }
        let record = record.clone();
        let saved = self.persist(id).await;
        tracing::info!(agent = id, branch = %record.branch, "salvage restored");
        let _ = reply.send(saved.map(|()| record));
    }
}

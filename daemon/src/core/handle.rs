use super::{Identity, ListPage, Listed, Msg, NewAgent, WorktreeUse};
use crate::error::Error;
use grove_proto::state::SessionAgent;
use grove_proto::types::AgentRecord;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The way into the core, cheap to clone.
#[derive(Clone)]
pub struct CoreHandle {
    tx: mpsc::Sender<Msg>,
}

/// What the core said to a spawn: the record, and (unless the agent was queued) the
/// promise of its start.
pub struct Accepted {
    pub record: AgentRecord,
    pub started: Option<oneshot::Receiver<Result<AgentRecord, Error>>>,
}

impl CoreHandle {
    pub(super) fn new(tx: mpsc::Sender<Msg>) -> Self {
        CoreHandle { tx }
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Msg,
    ) -> Result<T, Error> {
        self.request(make).await?
    }

    /// Sends what `make` builds around a reply channel and waits for the answer.
    async fn request<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Result<T, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)
    }

    /// Registers the agent and starts it, or queues it when no slot is free. Returns
    /// once it runs (or is queued).
    pub async fn spawn(&self, new: NewAgent) -> Result<AgentRecord, Error> {
        let accepted = self.ask(|reply| Msg::Spawn(Box::new(new), reply)).await?;
        match accepted.started {
            Some(started) => started.await.map_err(|_| Error::ShuttingDown)?,
            None => Ok(accepted.record),
        }
    }

    /// The agent that spawn `id` made, for a spawn sent again: waits for its start as
    /// the first spawn did; `None` when no such agent exists (it never came to be).
    pub async fn respawn(&self, id: &str) -> Result<Option<AgentRecord>, Error> {
        let accepted = self
            .ask(|reply| Msg::Respawn(id.to_string(), reply))
            .await?;
        match accepted {
            None => Ok(None),
            Some(Accepted {
                started: Some(started),
                ..
            }) => started.await.map_err(|_| Error::ShuttingDown)?.map(Some),
            Some(Accepted { record, .. }) => Ok(Some(record)),
        }
    }

    pub async fn get(&self, prefix: &str) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Get(prefix.to_string(), None, reply))
            .await
    }

    /// The agent `prefix` names as `viewer` sees it: itself and the agents it spawned,
    /// directly or not. Any other agent is answered exactly like one that does not
    /// exist, so that an agent cannot even learn which ids exist.
    pub async fn get_for(&self, prefix: &str, viewer: Option<&str>) -> Result<AgentRecord, Error> {
        let viewer = viewer.map(str::to_string);
        self.ask(|reply| Msg::Get(prefix.to_string(), viewer, reply))
            .await
    }

    /// A page of records ready to list, oldest first.
    pub async fn list(&self, page: ListPage) -> Result<Vec<Arc<Listed>>, Error> {
        self.ask(|reply| Msg::List(page, reply)).await
    }

    pub async fn queue(&self) -> Result<Vec<AgentRecord>, Error> {
        self.ask(Msg::Queue).await
    }

    /// Resolves once the agent is finished, with its final record.
    pub async fn wait(&self, prefix: &str) -> Result<AgentRecord, Error> {
        let finished = self
            .ask(|reply| Msg::Wait(prefix.to_string(), reply))
            .await?;
        finished.await.map_err(|_| Error::ShuttingDown)
    }

    pub async fn kill(&self, prefix: &str) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Kill(prefix.to_string(), reply)).await
    }

    /// Freezes (`frozen`) or thaws the agent's whole process tree.
    pub async fn pause(&self, prefix: &str, frozen: bool) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Pause(prefix.to_string(), frozen, reply))
            .await
    }

    /// Salvages and removes the kept worktree of a finished agent (`grove rm`, prune).
    pub async fn remove_kept(&self, prefix: &str, reason: &str) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::RemoveKept(prefix.to_string(), reason.to_string(), reply))
            .await
    }

    /// Deletes a finished agent's branch in its repository's lane, its tip kept under
    /// `refs/grove/salvage/discarded-<id>`.
    pub async fn discard(
        &self,
        prefix: &str,
    ) -> Result<grove_proto::methods::DiscardResult, Error> {
        self.ask(|reply| Msg::Discard(prefix.to_string(), reply))
            .await
    }

    /// Records what `grove merge` merged.
    pub async fn merged(
        &self,
        merged: grove_proto::methods::MergedParams,
    ) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Merged(merged, reply)).await
    }

    pub async fn forget(&self, ids: Vec<String>) -> Result<Vec<String>, Error> {
        self.ask(|reply| Msg::Forget(ids, true, reply)).await
    }

    /// Forgets finished agents' records but leaves their sessions to the caller: a
    /// purge deletes the session itself, with the audit row saying what went.
    pub async fn forget_records(&self, ids: Vec<String>) -> Result<Vec<String>, Error> {
        self.ask(|reply| Msg::Forget(ids, false, reply)).await
    }

    pub async fn snapshot(&self) -> Result<Vec<AgentRecord>, Error> {
        self.ask(Msg::Snapshot).await
    }

    /// How many agents the core knows, by status.
    pub async fn count_by_status(
        &self,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error> {
        self.ask(Msg::CountByStatus).await
    }

    /// The agents of session `name`, oldest first, without copying every record.
    pub async fn session_agents(&self, name: &str) -> Result<Vec<SessionAgent>, Error> {
        self.ask(|reply| Msg::SessionAgents(name.to_string(), reply))
            .await
    }

    /// Every agent's repository and worktree, and whether it is live.
    pub async fn worktrees(&self) -> Result<Vec<WorktreeUse>, Error> {
        self.ask(Msg::Worktrees).await
    }

    /// Directories that counted against the cap are gone: queued agents may start.
    pub async fn slots_freed(&self) {
        let _ = self.tx.send(Msg::SlotsFreed).await;
    }

    pub async fn disk_hold(&self, hold: Option<String>) {
        let _ = self.tx.send(Msg::DiskHold(hold)).await;
    }

    /// The agent holding `token`.
    pub async fn by_token(&self, token: &str) -> Result<Identity, Error> {
        self.ask(|reply| Msg::ByToken(token.to_string(), reply))
            .await
    }

    /// The running agent among a caller's ancestors (pid and start time, from the
    /// caller upwards).
    pub async fn by_ancestry(
        &self,
        pids: Vec<(u32, Option<u64>)>,
    ) -> Result<Option<Identity>, Error> {
        self.request(|reply| Msg::ByAncestry(pids, reply)).await
    }

    /// The agent with exactly this id, if it is live (starting or running).
    pub async fn live(&self, id: &str) -> Result<Option<Identity>, Error> {
        self.request(|reply| Msg::Live(id.to_string(), reply)).await
    }

    pub async fn report(&self, prefix: &str, text: String) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Report(prefix.to_string(), text, reply))
            .await
    }

    /// The console's word on what the agent does (fire and forget).
    pub async fn activity(&self, id: &str, waiting: bool) {
        let _ = self
            .tx
            .send(Msg::Activity(id.to_string(), waiting, None))
            .await;
    }

    /// The agent's own word on what it does (`grove status`).
    pub async fn set_activity(&self, prefix: &str, waiting: bool) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Activity(prefix.to_string(), waiting, Some(reply)))
            .await
    }

    /// Records agent `id`'s question (or finds it again, by its id); what it gets is the
    /// answer, at once when it was answered already.
    pub async fn ask_question(
        &self,
        id: &str,
        question: grove_proto::types::Question,
    ) -> Result<super::Asked, Error> {
        self.ask(|reply| Msg::Ask(id.to_string(), question, reply))
            .await
    }

    /// Answers the question of the agent `target` names, as the user (`by` none) or as
    /// the agent `by`, once the decision is stored in the asker's session.
    pub async fn answer_question(
        &self,
        target: &str,
        by: Option<String>,
        text: String,
    ) -> Result<grove_proto::types::Answered, Error> {
        self.ask(|reply| Msg::Answer {
            target: target.to_string(),
            by,
            text,
            reply,
        })
        .await
    }

    /// Question `question`'s deadline passed: it goes (fire and forget).
    pub async fn unask(&self, id: &str, question: &str) {
        let _ = self
            .tx
            .send(Msg::Unask(id.to_string(), question.to_string()))
            .await;
    }

    /// Checks out a salvage ref under the worktree root; the record tracking it.
    pub async fn restore(
        &self,
        target: crate::git::target::RepoTarget,
        reference: String,
    ) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Restore(target, reference, reply))
            .await
    }

    /// Live agents and the warm pool.
    pub async fn status(&self) -> super::Status {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Msg::Status(reply)).await.is_err() {
            return super::Status::default();
        }
        answer.await.unwrap_or_default()
    }

    /// Removes the warm pool (disk pressure); returns once it is gone. With `close`
    /// (shutdown) it is not refilled.
    pub async fn drain_pool(&self, close: bool) {
        let (done, gone) = oneshot::channel();
        if self.tx.send(Msg::PoolDrain(done, close)).await.is_ok() {
            let _ = gone.await;
        }
    }
}

use super::{Msg, NewAgent};
use crate::error::Error;
use grove_proto::types::AgentRecord;
use tokio::sync::{mpsc, oneshot};

/// The way into the core, cheap to clone.
#[derive(Clone)]
pub struct CoreHandle {
    tx: mpsc::Sender<Msg>,
}

impl CoreHandle {
    pub(super) fn new(tx: mpsc::Sender<Msg>) -> Self {
        CoreHandle { tx }
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Msg,
    ) -> Result<T, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    pub async fn register(&self, new: NewAgent) -> Result<(AgentRecord, String), Error> {
        self.ask(|reply| Msg::Register(Box::new(new), reply)).await
    }

    pub async fn discard(&self, id: &str) {
        let _ = self.tx.send(Msg::Discard(id.to_string())).await;
    }

    pub async fn started(&self, id: &str, pid: u32) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Started {
            id: id.to_string(),
            pid,
            reply,
        })
        .await
    }

    pub async fn get(&self, prefix: &str) -> Result<AgentRecord, Error> {
        self.ask(|reply| Msg::Get(prefix.to_string(), reply)).await
    }

    pub async fn list(&self, all: bool) -> Result<Vec<AgentRecord>, Error> {
        self.ask(|reply| Msg::List(all, reply)).await
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

    pub async fn count_live(&self) -> u64 {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Msg::CountLive(reply)).await.is_err() {
            return 0;
        }
        answer.await.unwrap_or(0)
    }
}

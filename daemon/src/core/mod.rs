//! The daemon's core: the one owner of the agent table. Everyone talks to it through
//! [`CoreHandle`]; slow work (git, waiting for processes) runs in tasks that report back
//! with messages, so the core never blocks.

mod agents;
mod handle;
mod lifecycle;

pub use handle::CoreHandle;
pub use lifecycle::NewAgent;

use crate::config::Config;
use crate::db::agents::AgentRow;
use crate::db::Db;
use crate::error::Error;
use crate::git::collect::Collected;
use crate::git::lane::Lanes;
use grove_proto::types::AgentRecord;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

type Reply<T> = oneshot::Sender<Result<T, Error>>;

pub enum Msg {
    Register(Box<NewAgent>, Reply<(AgentRecord, String)>),
    Discard(String),
    Started {
        id: String,
        pid: u32,
        reply: Reply<AgentRecord>,
    },
    ShimExited(String),
    Collected(String, Result<Collected, Error>),
    Get(String, Reply<AgentRecord>),
    List(bool, Reply<Vec<AgentRecord>>),
    Wait(String, Reply<oneshot::Receiver<AgentRecord>>),
    Kill(String, Reply<AgentRecord>),
    CountLive(oneshot::Sender<u64>),
}

pub struct Core {
    agents: HashMap<String, AgentRow>,
    waiters: HashMap<String, Vec<oneshot::Sender<AgentRecord>>>,
    db: Db,
    lanes: Lanes,
    config: Arc<Config>,
    tx: mpsc::Sender<Msg>,
}

impl Core {
    /// Loads the agent table and reconciles it with the processes that are (or are not)
    /// still alive, then returns the handle; the core runs until every handle is dropped
    /// and `shutdown` fires.
    pub async fn start(
        db: Db,
        lanes: Lanes,
        config: Arc<Config>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<CoreHandle, Error> {
        let rows = db.call(|conn| crate::db::agents::load_all(conn)).await?;
        let (tx, rx) = mpsc::channel(1024);
        let mut core = Core {
            agents: rows
                .into_iter()
                .map(|row| (row.record.id.clone(), row))
                .collect(),
            waiters: HashMap::new(),
            db,
            lanes,
            config,
            tx: tx.clone(),
        };
        core.reconcile().await;
        tokio::spawn(core.serve(rx, shutdown));
        Ok(CoreHandle::new(tx))
    }

    async fn serve(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let stopped = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => self.handle(msg).await,
                    None => break,
                },
                () = &mut stopped => break,
            }
        }
        tracing::debug!("core stopped");
    }

    async fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Register(new, reply) => {
                let _ = reply.send(self.register(*new).await);
            }
            Msg::Discard(id) => self.discard(&id).await,
            Msg::Started { id, pid, reply } => {
                let _ = reply.send(self.started(&id, pid).await);
            }
            Msg::ShimExited(id) => self.shim_exited(&id).await,
            Msg::Collected(id, result) => self.collected(&id, result).await,
            Msg::Get(prefix, reply) => {
                let _ = reply.send(self.resolve(&prefix).map(|row| row.record.clone()));
            }
            Msg::List(all, reply) => {
                let _ = reply.send(Ok(self.list(all)));
            }
            Msg::Wait(prefix, reply) => {
                let _ = reply.send(self.wait(&prefix));
            }
            Msg::Kill(prefix, reply) => {
                let _ = reply.send(self.kill(&prefix));
            }
            Msg::CountLive(reply) => {
                let live = self
                    .agents
                    .values()
                    .filter(|row| !row.record.status.is_final())
                    .count();
                let _ = reply.send(live as u64);
            }
        }
    }

    /// Writes a row through to the database. A failed write is logged loudly: the
    /// in-memory table stays authoritative until the next successful write.
    async fn persist(&self, id: &str) {
        let Some(row) = self.agents.get(id).cloned() else {
            return;
        };
        if let Err(e) = self
            .db
            .call(move |conn| crate::db::agents::upsert(conn, &row))
            .await
        {
            tracing::error!(agent = id, error = %e, "cannot persist agent record");
        }
    }
}

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::{AgentList, WaitMode, WaitParams};
use grove_proto::types::AgentRecord;

/// Resolves every id first (so a typo fails at once), then waits: for all of them, or
/// (`any`) for the first to finish, returning the ones finished by then.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: WaitParams) -> Result<AgentList, Error> {
    if params.ids.is_empty() {
        return Err(Error::BadInput(
            "give at least one agent id to wait for".into(),
        ));
    }
    let mut ids = Vec::with_capacity(params.ids.len());
    for prefix in &params.ids {
        let record = visible(ctx, conn, prefix).await?;
        ids.push(record.id);
    }
    let agents = match params.mode {
        WaitMode::All => {
            let mut agents = Vec::with_capacity(ids.len());
            for id in &ids {
                agents.push(ctx.core.wait(id).await?);
            }
            agents
        }
        WaitMode::Any => wait_any(ctx, &ids).await?,
    };
    Ok(AgentList { agents, next: None })
}

async fn wait_any(ctx: &Ctx, ids: &[String]) -> Result<Vec<AgentRecord>, Error> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(ids.len());
    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            let (core, tx, id) = (ctx.core.clone(), tx.clone(), id.clone());
            tokio::spawn(async move {
                let _ = tx.send(core.wait(&id).await).await;
            })
        })
        .collect();
    drop(tx);
    let first = rx.recv().await.ok_or(Error::ShuttingDown);
    for wait in waits {
        wait.abort();
    }
    first??;
    let mut finished = Vec::new();
    for id in ids {
        let record = ctx.core.get(id).await?;
        if record.status.is_final() {
            finished.push(record);
        }
    }
    Ok(finished)
}

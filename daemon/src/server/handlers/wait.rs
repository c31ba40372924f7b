use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::{AgentList, WaitMode, WaitParams, WaitUntil};
use grove_proto::types::AgentRecord;
use std::time::Duration;

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
    let waiting = async {
        match (params.mode, params.until) {
            (WaitMode::All, until) => {
                let mut agents = Vec::with_capacity(ids.len());
                for id in &ids {
                    agents.push(wait_one(ctx, id, until).await?);
                }
                Ok(agents)
            }
            (WaitMode::Any, until) => wait_any(ctx, &ids, until).await,
        }
    };
    let agents = match params.timeout_ms {
        None => waiting.await?,
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), waiting).await {
            Ok(agents) => agents?,
            // Time is up: every agent as it is now; the caller tells who arrived.
            Err(_) => {
                let mut agents = Vec::with_capacity(ids.len());
                for id in &ids {
                    agents.push(ctx.core.get(id).await?);
                }
                agents
            }
        },
    };
    Ok(AgentList { agents, next: None })
}

async fn wait_one(ctx: &Ctx, id: &str, until: WaitUntil) -> Result<AgentRecord, Error> {
    match until {
        WaitUntil::Finished => ctx.core.wait(id).await,
        WaitUntil::Waiting => until_waiting(&ctx.core, &ctx.events, id).await,
    }
}

fn arrived(record: &AgentRecord, until: WaitUntil) -> bool {
    record.status.is_final()
        || (until == WaitUntil::Waiting
            && record.activity == Some(grove_proto::types::Activity::Waiting))
}

/// Until the agent waits for input or is finished: every event about it is a reason
/// to look again (subscribed before the first look, so that no change slips between).
async fn until_waiting(
    core: &crate::core::CoreHandle,
    bus: &crate::events::EventBus,
    id: &str,
) -> Result<AgentRecord, Error> {
    use tokio::sync::broadcast::error::RecvError;
    let mut events = bus.subscribe();
    loop {
        let record = core.get(id).await?;
        if arrived(&record, WaitUntil::Waiting) {
            return Ok(record);
        }
        loop {
            match events.recv().await {
                Ok(event) if event.agent.as_deref() == Some(id) => break,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => return Err(Error::ShuttingDown),
            }
        }
    }
}

async fn wait_any(ctx: &Ctx, ids: &[String], until: WaitUntil) -> Result<Vec<AgentRecord>, Error> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(ids.len());
    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            let (core, tx, id) = (ctx.core.clone(), tx.clone(), id.clone());
            let bus = ctx.events.clone();
            tokio::spawn(async move {
                let result = match until {
                    WaitUntil::Finished => core.wait(&id).await,
                    WaitUntil::Waiting => until_waiting(&core, &bus, &id).await,
                };
                let _ = tx.send(result).await;
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
        if arrived(&record, until) {
            finished.push(record);
        }
    }
    Ok(finished)
}

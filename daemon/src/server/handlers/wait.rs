use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{AgentList, WaitParams};

/// Resolves every id first (so a typo fails at once), then waits for all of them.
pub async fn handle(ctx: &Ctx, params: WaitParams) -> Result<AgentList, Error> {
    if params.ids.is_empty() {
        return Err(Error::BadInput(
            "give at least one agent id to wait for".into(),
        ));
    }
    let mut ids = Vec::with_capacity(params.ids.len());
    for prefix in &params.ids {
        ids.push(ctx.core.get(prefix).await?.id);
    }
    let mut agents = Vec::with_capacity(ids.len());
    for id in &ids {
        agents.push(ctx.core.wait(id).await?);
    }
    Ok(AgentList { agents })
}

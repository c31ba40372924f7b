use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::{AgentList, ListParams};

/// Inside an agent, only the agents it spawned.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: ListParams) -> Result<AgentList, Error> {
    let agents = ctx.core.list(params.all).await?;
    Ok(AgentList {
        agents: visible(ctx, conn, agents).await,
    })
}

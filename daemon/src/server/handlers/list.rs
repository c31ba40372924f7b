use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{AgentList, ListParams};

pub async fn handle(ctx: &Ctx, params: ListParams) -> Result<AgentList, Error> {
    Ok(AgentList {
        agents: ctx.core.list(params.all).await?,
    })
}

use super::super::Ctx;
use crate::Error;
use grove_proto::methods::AgentList;

pub async fn handle(ctx: &Ctx) -> Result<AgentList, Error> {
    Ok(AgentList {
        next: None,
        agents: ctx.core.queue().await?,
    })
}

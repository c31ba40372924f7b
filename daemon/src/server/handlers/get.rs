use super::super::Ctx;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

pub async fn handle(ctx: &Ctx, params: IdParams) -> Result<AgentRecord, Error> {
    ctx.core.get(&params.id).await
}

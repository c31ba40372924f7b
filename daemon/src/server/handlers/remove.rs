use super::super::Ctx;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

/// `agent.remove`: salvage and remove the kept worktree of a finished agent.
pub async fn handle(ctx: &Ctx, params: IdParams) -> Result<AgentRecord, Error> {
    ctx.core.remove_kept(&params.id, "rm").await
}

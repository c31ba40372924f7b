use super::super::Ctx;
use crate::Error;
use grove_proto::methods::MergedParams;
use grove_proto::types::AgentRecord;

/// `agent.merged`: `grove merge` (git in the user's process) tells the daemon what it
/// merged; the daemon logs it, publishes `agent.merged` and, after `--delete`, records
/// that the branch is gone.
pub async fn handle(ctx: &Ctx, params: MergedParams) -> Result<AgentRecord, Error> {
    ctx.core.merged(params).await
}

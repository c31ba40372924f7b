use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::may_touch;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

/// Stops the agent and every agent it spawned.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: IdParams) -> Result<AgentRecord, Error> {
    let record = ctx.core.get(&params.id).await?;
    may_touch(ctx, conn, &record, "kill").await?;
    ctx.core.kill(&record.id).await
}

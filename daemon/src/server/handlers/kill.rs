use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

/// Stops the agent and every agent it spawned.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: IdParams) -> Result<AgentRecord, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    ctx.core.kill(&record.id).await
}

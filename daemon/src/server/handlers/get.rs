use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

pub async fn handle(ctx: &Ctx, conn: &Conn, params: IdParams) -> Result<AgentRecord, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    Ok(record)
}

use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::AgentList;

pub async fn handle(ctx: &Ctx, conn: &Conn) -> Result<AgentList, Error> {
    super::authority::user_only(conn, "see the queue")?;
    Ok(AgentList {
        next: None,
        agents: ctx.core.queue().await?,
    })
}

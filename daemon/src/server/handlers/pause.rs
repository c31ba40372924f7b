//! `agent.pause` and `agent.resume`: freeze and thaw an agent's whole process tree.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::IdParams;
use grove_proto::types::AgentRecord;

/// An agent may pause or resume the agents it spawned (and theirs), never itself: a
/// frozen caller could not even read the answer.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: IdParams,
    frozen: bool,
) -> Result<AgentRecord, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    if let Some(me) = conn.agent().filter(|me| me.id == record.id) {
        return Err(Error::Refused(format!(
            "agent {} may not {} itself; only the agents it spawned",
            me.id,
            if frozen { "pause" } else { "resume" }
        )));
    }
    ctx.core.pause(&record.id, frozen).await
}

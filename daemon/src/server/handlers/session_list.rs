use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::SessionListResult;

pub async fn handle(ctx: &Ctx, conn: &Conn) -> Result<SessionListResult, Error> {
    let mut sessions = ctx.state.list().await?;
    if let Some(me) = conn.agent() {
        sessions.retain(|s| s.name == me.session);
    }
    let agents = ctx.core.snapshot().await?;
    for session in &mut sessions {
        super::session_show::attach_agents(session, &agents);
    }
    Ok(SessionListResult { sessions })
}

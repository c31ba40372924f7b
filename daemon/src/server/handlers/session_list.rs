use super::super::Ctx;
use crate::Error;
use grove_proto::methods::SessionListResult;

pub async fn handle(ctx: &Ctx) -> Result<SessionListResult, Error> {
    let mut sessions = ctx.state.list().await?;
    let agents = ctx.core.snapshot().await?;
    for session in &mut sessions {
        super::session_show::attach_agents(session, &agents);
    }
    Ok(SessionListResult { sessions })
}

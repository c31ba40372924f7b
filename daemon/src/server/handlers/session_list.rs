use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{SessionListParams, SessionListResult};

const MAX_PAGE: usize = 1_000;

/// `session.list`: sessions by name, in pages of at most 1000 and within the line cap.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: SessionListParams,
) -> Result<SessionListResult, Error> {
    let mut sessions = ctx.state.list().await?;
    if let Some(me) = conn.agent() {
        sessions.retain(|s| s.name == me.session);
    }
    if let Some(after) = &params.after {
        sessions.retain(|s| s.name.as_str() > after.as_str());
    }
    let limit = params
        .limit
        .map_or(MAX_PAGE, |l| (l as usize).clamp(1, MAX_PAGE));
    let more = sessions.len() > limit;
    sessions.truncate(limit);
    let agents = ctx.core.snapshot().await?;
    for session in &mut sessions {
        super::session_show::attach_agents(session, &agents);
    }
    let fits = super::fitting_a_page(&sessions);
    let cut = fits < sessions.len();
    sessions.truncate(fits);
    let next = (more || cut)
        .then(|| sessions.last().map(|s| s.name.clone()))
        .flatten();
    Ok(SessionListResult { sessions, next })
}

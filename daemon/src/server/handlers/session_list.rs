use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{SessionListParams, SessionListResult};
use grove_proto::MAX_LINE_BYTES;

const MAX_PAGE: usize = 1_000;
/// Sessions per answer stay under this many bytes of JSON, inside the line cap.
const MAX_PAGE_BYTES: u64 = (MAX_LINE_BYTES - 64 * 1024) as u64;

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
    let mut bytes = 0;
    let mut fits = sessions.len();
    for (n, session) in sessions.iter_mut().enumerate() {
        super::session_show::attach_agents(session, &agents);
        bytes += crate::sessions::json_bytes(session) + 1;
        if n > 0 && bytes > MAX_PAGE_BYTES {
            fits = n;
            break;
        }
    }
    let cut = fits < sessions.len();
    sessions.truncate(fits);
    let next = (more || cut)
        .then(|| sessions.last().map(|s| s.name.clone()))
        .flatten();
    Ok(SessionListResult { sessions, next })
}

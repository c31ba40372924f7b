use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateCompactParams, StateCompactResult};

/// `state.compact`: drop all but the newest `keep` checkpoints; no kept state changes.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: StateCompactParams,
) -> Result<StateCompactResult, Error> {
    super::authority::user_only(conn, "compact state")?;
    let (dropped, oldest) = ctx.state.compact(&params.session, params.keep).await?;
    Ok(StateCompactResult {
        session: params.session,
        dropped,
        oldest,
    })
}

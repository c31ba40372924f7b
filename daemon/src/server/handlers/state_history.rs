use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateHistoryParams, StateHistoryResult};

/// `state.history`: the newest checkpoints first.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: StateHistoryParams,
) -> Result<StateHistoryResult, Error> {
    let caller = super::caller(
        ctx,
        conn,
        params.session.as_deref(),
        params.token.as_deref(),
    )
    .await?;
    let limit = params.limit.unwrap_or(100).clamp(1, 100_000);
    let checkpoints = ctx.state.history(&caller.session, limit).await?;
    Ok(StateHistoryResult {
        session: caller.session,
        checkpoints,
    })
}

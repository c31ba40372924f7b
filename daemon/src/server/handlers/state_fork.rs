use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::StateForkParams;
use grove_proto::state::SessionInfo;

/// `state.fork`: a new session starting from a checkpoint of another.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: StateForkParams) -> Result<SessionInfo, Error> {
    let caller = super::caller(ctx, conn, &params).await?;
    ctx.state
        .fork(
            &caller.session,
            params.at,
            &params.new_session,
            &caller.writer,
        )
        .await
}

use super::super::Ctx;
use super::Caller;
use crate::Error;
use grove_proto::methods::StateForkParams;
use grove_proto::state::SessionInfo;

/// `state.fork`: a new session starting from a checkpoint of another.
pub async fn handle(
    ctx: &Ctx,
    caller: Caller,
    params: StateForkParams,
) -> Result<SessionInfo, Error> {
    ctx.state
        .fork(
            &caller.session,
            params.at,
            &params.new_session,
            &caller.writer,
        )
        .await
}

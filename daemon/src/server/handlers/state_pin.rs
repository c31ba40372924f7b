use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StatePinParams, StatePinResult};

/// `state.pin`: keep a checkpoint readable through compaction (or stop keeping it).
pub async fn handle(ctx: &Ctx, params: StatePinParams) -> Result<StatePinResult, Error> {
    let pinned = ctx
        .state
        .pin(&params.session, params.at, !params.unpin)
        .await?;
    Ok(StatePinResult {
        session: params.session,
        pinned,
    })
}

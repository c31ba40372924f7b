use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateCompactParams, StateCompactResult};

/// `state.compact`: drop all but the newest `keep` checkpoints; no kept state changes.
pub async fn handle(ctx: &Ctx, params: StateCompactParams) -> Result<StateCompactResult, Error> {
    let (dropped, oldest) = ctx.state.compact(&params.session, params.keep).await?;
    Ok(StateCompactResult {
        session: params.session,
        dropped,
        oldest,
    })
}

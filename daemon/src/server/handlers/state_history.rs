use super::super::Ctx;
use super::Caller;
use crate::Error;
use grove_proto::methods::{StateHistoryParams, StateHistoryResult};

/// `state.history`: the newest checkpoints first, in pages within the line cap.
pub async fn handle(
    ctx: &Ctx,
    caller: Caller,
    params: StateHistoryParams,
) -> Result<StateHistoryResult, Error> {
    let limit = params.limit.unwrap_or(100).clamp(1, 100_000);
    let mut checkpoints = ctx
        .state
        .history(&caller.session, limit, params.before)
        .await?;
    let fits = super::fitting_a_page(&checkpoints);
    let next = (fits < checkpoints.len()).then(|| checkpoints[fits - 1].id);
    checkpoints.truncate(fits);
    Ok(StateHistoryResult {
        session: caller.session,
        checkpoints,
        next,
    })
}

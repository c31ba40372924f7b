use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{GcLogParams, GcLogResult};

/// `janitor.log`: what grove removed, when, why, and where the work went.
pub async fn handle(ctx: &Ctx, params: GcLogParams) -> Result<GcLogResult, Error> {
    let limit = params.limit.unwrap_or(100).clamp(1, 10_000);
    let removals = ctx
        .db
        .call(move |conn| crate::db::removals::recent(conn, limit))
        .await?;
    let sessions = ctx.state.removals(limit).await?;
    Ok(GcLogResult { removals, sessions })
}

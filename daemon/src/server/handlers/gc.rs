use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{GcParams, GcReport};

/// `janitor.gc`: the prune pass, now.
pub async fn handle(ctx: &Ctx, params: GcParams) -> Result<GcReport, Error> {
    ctx.janitor.gc(params.dry_run).await
}

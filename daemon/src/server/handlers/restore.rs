use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{RestoreParams, RestoreResult};

/// `salvage.restore`: a salvage ref back as a branch and a worktree grove tracks.
pub async fn handle(ctx: &Ctx, params: RestoreParams) -> Result<RestoreResult, Error> {
    let target = super::client_repo(&params.repo).await?;
    let record = ctx.core.restore(target, params.reference).await?;
    Ok(RestoreResult {
        id: record.id,
        branch: record.branch,
        worktree: record.worktree,
    })
}

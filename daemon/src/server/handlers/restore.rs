use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{RestoreParams, RestoreResult};

/// `salvage.restore`: a salvage ref back as a branch and a worktree grove tracks.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: RestoreParams) -> Result<RestoreResult, Error> {
    super::authority::user_only(conn, "restore salvage refs")?;
    let target = super::client_repo(&params.repo).await?;
    let record = ctx.core.restore(target, params.reference).await?;
    Ok(RestoreResult {
        id: record.id,
        branch: record.branch,
        worktree: record.worktree,
    })
}

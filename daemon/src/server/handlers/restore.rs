use super::super::connection::Conn;
use super::super::Ctx;
use crate::git::target::resolve_repo;
use crate::Error;
use grove_proto::methods::{RestoreParams, RestoreResult};

/// `salvage.restore`: a salvage ref back as a branch and a worktree grove tracks.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: RestoreParams) -> Result<RestoreResult, Error> {
    super::authority::user_only(conn, "restore salvage refs")?;
    if !params.repo.is_absolute() {
        return Err(Error::BadInput(format!(
            "repo path `{}` must be absolute",
            params.repo.display()
        )));
    }
    let repo = params.repo.clone();
    let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await??;
    let record = ctx.core.restore(target, params.reference).await?;
    Ok(RestoreResult {
        id: record.id,
        branch: record.branch,
        worktree: record.worktree,
    })
}

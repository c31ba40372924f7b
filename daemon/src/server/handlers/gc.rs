use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{GcParams, GcReport};

/// `janitor.gc`: the prune pass, now.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: GcParams) -> Result<GcReport, Error> {
    super::authority::user_only(conn, "run the prune pass")?;
    ctx.janitor.gc(params.dry_run).await
}

use super::super::Ctx;
use crate::Error;
use grove_proto::methods::SessionRmParams;
use grove_proto::state::SessionRemoval;

/// `session.rm`: deletes a session's head, checkpoints and snapshots, keeping an audit
/// row. Refused while agents of it are live, unless forced.
pub async fn handle(ctx: &Ctx, params: SessionRmParams) -> Result<SessionRemoval, Error> {
    if params.purge {
        return super::session_purge::handle(ctx, params).await;
    }
    if params.salvage_too {
        return Err(Error::BadInput(
            "salvage_too goes with purge: only a purge deletes agents' refs; nothing was \
             deleted"
                .into(),
        ));
    }
    let live: Vec<String> = ctx
        .core
        .snapshot()
        .await?
        .into_iter()
        .filter(|a| a.session == params.name && !a.status.is_final())
        .map(|a| a.id)
        .collect();
    if !live.is_empty() && !params.force {
        return Err(Error::Refused(format!(
            "session `{}` has live agents ({}); nothing was deleted: stop them first \
             (`grove kill ID`), or delete it anyway with --force (their later state calls fail)",
            params.name,
            live.join(", ")
        )));
    }
    let reason = params.reason.unwrap_or_else(|| "rm".into());
    ctx.state.remove(&params.name, "user", &reason, live).await
}

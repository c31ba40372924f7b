use super::super::Ctx;
use super::Caller;
use crate::Error;
use grove_proto::methods::StateForkParams;
use grove_proto::state::SessionInfo;

/// `state.fork`: a new session starting from a checkpoint of another.
pub async fn handle(
    ctx: &Ctx,
    caller: Caller,
    params: StateForkParams,
) -> Result<SessionInfo, Error> {
    let info = ctx
        .state
        .fork(
            &caller.session,
            params.at,
            &params.new_session,
            &caller.writer,
            params.migrate,
        )
        .await?;
    // The fork's first checkpoint carries the code of its origin: it gets a ref of its
    // own, which outlives the origin's.
    if let Ok(code) = ctx.state.code_at(&info.name, info.head).await {
        if let Some(repo) = code.repo.clone() {
            let (session, at) = (info.name.clone(), info.head);
            let named = tokio::task::spawn_blocking(move || {
                crate::sessions::code_ref::name_code(&repo, &session, at, &code)
            })
            .await?;
            if let Err(e) = named {
                tracing::warn!(session = %info.name, error = %e, "cannot name the code of a fork");
            }
        }
    }
    Ok(info)
}

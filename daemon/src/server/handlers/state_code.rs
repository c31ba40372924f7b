use super::super::Ctx;
use super::Caller;
use crate::Error;
use grove_proto::methods::{StateCodeParams, StateCodeResult};

/// `state.code`: the code recorded at a checkpoint, as a commit of its tree on
/// `refs/grove/checkpoints/<session>/<at>` (the branch tip it recorded as its parent),
/// so that a spawn can start from it.
pub async fn handle(
    ctx: &Ctx,
    caller: Caller,
    params: StateCodeParams,
) -> Result<StateCodeResult, Error> {
    let code = ctx.state.code_at(&caller.session, params.at).await?;
    let Some(repo) = code.repo.clone() else {
        return Err(Error::InvalidState(format!(
            "checkpoint {} of session `{}` was recorded without its repository",
            params.at, caller.session
        )));
    };
    let reference = crate::sessions::code::checkpoint_ref(&caller.session, params.at);
    let (session, at) = (caller.session.clone(), params.at);
    let left_out = code.left_out.clone();
    let commit = {
        let repo = repo.clone();
        tokio::task::spawn_blocking(move || {
            crate::sessions::code_ref::name_code(&repo, &session, at, &code)
        })
        .await??
    };
    Ok(StateCodeResult {
        session: caller.session,
        at: params.at,
        repo,
        reference,
        commit: commit.0,
        tree: commit.1,
        left_out,
    })
}

use super::super::Ctx;
use super::Caller;
use crate::git::code_store;
use crate::sessions::code_ref::name_code;
use crate::Error;
use grove_proto::methods::StateForkParams;
use grove_proto::state::{CodeRef, SessionInfo};
use std::path::PathBuf;

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
            (&caller.writer, caller.tree.as_deref()),
            params.migrate,
        )
        .await?;
    // The fork's first checkpoint carries the code of its origin: it gets a ref of its
    // own, which outlives the origin's.
    if let Ok(code) = ctx.state.code_at(&info.name, info.head).await {
        if let Some(repo) = code.repo.clone() {
            if let Err(e) = name_fork_code(ctx, repo, &info.name, info.head, code).await {
                tracing::warn!(session = %info.name, error = %e, "cannot name the code of a fork");
            }
        }
    }
    Ok(info)
}

/// The fork's ref goes where its code is: the user's repository, or the code store of
/// the jailed agent that still holds it, whose collect brings the ref in with the code.
/// Decided in the repository's lane, where that collect runs, so that the store cannot
/// go in between.
async fn name_fork_code(
    ctx: &Ctx,
    repo: PathBuf,
    session: &str,
    at: u64,
    code: CodeRef,
) -> Result<(), Error> {
    let session = session.to_string();
    let Some(agent) = code.held_by.clone() else {
        return tokio::task::spawn_blocking(move || name_code(&repo, &session, at, &code))
            .await?
            .map(drop);
    };
    let store = code_store::path(&ctx.config.dirs.agent_dir(&agent));
    let target = super::client_repo(&repo).await?;
    ctx.lanes
        .run(&target, move |_lane| {
            let in_users = git2::Repository::open(&repo)
                .ok()
                .zip(git2::Oid::from_str(&code.tree).ok())
                .is_some_and(|(r, t)| r.find_tree(t).is_ok());
            let place = if in_users || !store.join("HEAD").is_file() {
                repo
            } else {
                store
            };
            name_code(&place, &session, at, &code).map(drop)
        })
        .await
}

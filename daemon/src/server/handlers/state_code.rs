use super::super::Ctx;
use super::Caller;
use crate::git::code_store;
use crate::Error;
use grove_proto::methods::{StateCodeParams, StateCodeResult};
use grove_proto::state::CodeRef;
use std::path::Path;

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
    bring_in_held(ctx, &caller, &code, &repo, &reference)
        .await
        .map_err(|e| held_error(e, &caller.session, params.at, &code))?;
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

/// A jailed agent's checkpoint keeps its code in the agent's code store until the
/// agent is collected. Before then the user's own request brings it in as `reference`,
/// under the rule the collect applies (no object over `salvage_max_file`); an agent's
/// is refused, or agents could put into the user's repository what the store keeps out.
async fn bring_in_held(
    ctx: &Ctx,
    caller: &Caller,
    code: &CodeRef,
    repo: &Path,
    reference: &str,
) -> Result<(), Error> {
    let Some(agent) = code.held_by.clone() else {
        return Ok(());
    };
    let has_tree = {
        let (repo, tree) = (repo.to_path_buf(), code.tree.clone());
        tokio::task::spawn_blocking(move || {
            git2::Repository::open(&repo)
                .ok()
                .zip(git2::Oid::from_str(&tree).ok())
                .is_some_and(|(r, t)| r.find_tree(t).is_ok())
        })
        .await?
    };
    if has_tree {
        return Ok(());
    }
    if caller.agent {
        return Err(Error::InvalidState(format!(
            "it is in the code store of jailed agent {agent} until that agent is collected, \
             and an agent's request never brings it into the repository; wait for {agent} \
             to end (`grove wait {agent}`), or ask the user to run `grove state fork --spawn`"
        )));
    }
    let store = code_store::path(&ctx.config.dirs.agent_dir(&agent));
    let target = super::client_repo(repo).await?;
    let (tree, dest, max_file) = (
        code.tree.clone(),
        reference.to_string(),
        ctx.config.salvage_max_file,
    );
    ctx.lanes
        .run(&target, move |lane| {
            code_store::bring_tree_in(&lane.target.common_dir, &store, &tree, &dest, max_file)
        })
        .await
}

/// Says which checkpoint a failure to bring in its code is about.
fn held_error(e: Error, session: &str, at: u64, code: &CodeRef) -> Error {
    let about = |why: String| {
        format!(
            "the code of checkpoint {at} of `{session}` (tree {}) cannot be used: {why}",
            code.tree
        )
    };
    match e {
        Error::InvalidState(why) => Error::InvalidState(about(why)),
        Error::NotFound(why) => Error::NotFound(about(why)),
        other => other,
    }
}

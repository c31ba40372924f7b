use super::super::Ctx;
use super::Caller;
use crate::git::authorship::Identity;
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
    let (session, at) = (caller.session.clone(), params.at);
    let commit = {
        let (repo, reference) = (repo.clone(), reference.clone());
        tokio::task::spawn_blocking(move || commit_of(&repo, &reference, &code, &session, at))
            .await??
    };
    Ok(StateCodeResult {
        session: caller.session,
        at: params.at,
        repo,
        reference,
        commit: commit.0,
        tree: commit.1,
    })
}

/// Makes (or finds) the commit of the recorded tree and points `reference` at it.
/// Bookkeeping with libgit2: no hook, filter or helper runs.
fn commit_of(
    repo_path: &Path,
    reference: &str,
    code: &CodeRef,
    session: &str,
    at: u64,
) -> Result<(String, String), Error> {
    let git = |e: git2::Error| Error::Git(format!("{}: {}", repo_path.display(), e.message()));
    let repo = git2::Repository::open(repo_path).map_err(git)?;
    let tree_id = git2::Oid::from_str(&code.tree).map_err(git)?;
    let tree = repo.find_tree(tree_id).map_err(|_| {
        Error::NotFound(format!(
            "the tree {} recorded at checkpoint {at} of `{session}` is no longer in {} \
             (pruned by git gc?)",
            code.tree,
            repo_path.display()
        ))
    })?;
    if let Ok(existing) = repo.find_reference(reference) {
        if let Ok(commit) = existing.peel_to_commit() {
            if commit.tree_id() == tree_id {
                return Ok((commit.id().to_string(), code.tree.clone()));
            }
        }
    }
    // The recorded tip is the parent when the user's repository has it (a jailed
    // agent's commits arrive there at collect).
    let parent = code
        .commit
        .as_deref()
        .and_then(|c| git2::Oid::from_str(c).ok())
        .and_then(|c| repo.find_commit(c).ok());
    let grove = Identity::grove();
    let signature = git2::Signature::now(&grove.name, &grove.email).map_err(git)?;
    let message = format!("grove: the code of checkpoint {at} of session {session}\n");
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let commit = repo
        .commit(None, &signature, &signature, &message, &tree, &parents)
        .map_err(git)?;
    repo.reference(reference, commit, true, "grove: state.code")
        .map_err(|e| {
            Error::BadInput(format!(
                "cannot name the code `{reference}` in {}: {}",
                repo_path.display(),
                e.message()
            ))
        })?;
    Ok((commit.to_string(), code.tree.clone()))
}

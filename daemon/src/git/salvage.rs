//! Salvage: commit whatever a worktree holds before grove removes it.

use crate::error::Error;
use git2::{IndexAddOption, Oid, Repository, Signature};
use std::path::Path;

fn git_err<'a>(what: &str, path: &'a Path) -> impl FnOnce(git2::Error) -> Error + 'a {
    let what = what.to_string();
    move |e| {
        Error::Git(format!(
            "salvage of {}: {what}: {}",
            path.display(),
            e.message()
        ))
    }
}

/// Commits tracked changes and untracked, non-ignored files onto the worktree's HEAD.
/// Returns the new commit, or `None` when there was nothing to commit. git2, not the CLI:
/// salvage must never run the user's hooks, which could refuse the commit.
pub fn salvage(worktree: &Path, message: &str) -> Result<Option<Oid>, Error> {
    let repo = Repository::open(worktree).map_err(git_err("opening", worktree))?;
    // Every process of the agent is gone by now, so a leftover index.lock is stale.
    let _ = std::fs::remove_file(repo.path().join("index.lock"));
    let mut index = repo
        .index()
        .map_err(git_err("reading the index", worktree))?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(git_err("adding files", worktree))?;
    index
        .update_all(["*"], None)
        .map_err(git_err("recording deletions", worktree))?;
    index
        .write()
        .map_err(git_err("writing the index", worktree))?;
    let tree_id = index
        .write_tree()
        .map_err(git_err("writing the tree", worktree))?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    if parent.as_ref().is_some_and(|p| p.tree_id() == tree_id) {
        return Ok(None);
    }
    let tree = repo
        .find_tree(tree_id)
        .map_err(git_err("finding the tree", worktree))?;
    let signature = Signature::now("grove", "grove@localhost")
        .map_err(git_err("making a signature", worktree))?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let commit = repo
        .commit(
            Some("HEAD"),
            &signature,
            &signature,
            message,
            &tree,
            &parents,
        )
        .map_err(git_err("committing", worktree))?;
    Ok(Some(commit))
}

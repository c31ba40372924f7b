//! Salvage of worktrees no agent owns (orphans, warm-pool worktrees): commit whatever
//! they hold onto a salvage ref before grove removes them. Agents' worktrees are
//! salvaged by `collect` through a scratch repository instead.

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

/// For a worktree grove cannot match to an agent: commit its leftovers without moving
/// any branch, and point `refs/grove/salvage/<name>` (or `<name>-2`, ... if taken) at
/// the result. Returns the ref and its commit; `Ok(None)` when HEAD is unborn and the
/// worktree holds nothing.
pub fn salvage_orphan(worktree: &Path, name: &str) -> Result<Option<(String, Oid)>, Error> {
    let repo = Repository::open(worktree).map_err(git_err("opening", worktree))?;
    let message = format!(
        "grove: salvage of unknown worktree {name}\n\n\
         grove found {} with no agent record and committed what it held.",
        worktree.display()
    );
    let commit = commit_everything(&repo, worktree, &message, None, &[])?;
    let head = repo.head().ok().and_then(|h| h.target());
    let Some(target) = commit.or(head) else {
        return Ok(None);
    };
    let reference = free_ref_name(&repo, name);
    repo.reference(&reference, target, false, "grove: salvage")
        .map_err(git_err("writing the salvage ref", worktree))?;
    Ok(Some((reference, target)))
}

/// For a warm-pool worktree, which no agent ever used: commit only if someone wrote
/// into it, onto `refs/grove/salvage/<name>`; a clean one leaves no ref behind.
pub fn salvage_if_dirty(worktree: &Path, name: &str) -> Result<Option<(String, Oid)>, Error> {
    let repo = Repository::open(worktree).map_err(git_err("opening", worktree))?;
    let message = format!(
        "grove: salvage of warm-pool worktree {name}\n\n\
         No agent used {}, yet it held changes; grove committed them before removing it.",
        worktree.display()
    );
    let Some(commit) = commit_everything(&repo, worktree, &message, None, &[])? else {
        return Ok(None);
    };
    let reference = free_ref_name(&repo, name);
    repo.reference(&reference, commit, false, "grove: salvage")
        .map_err(git_err("writing the salvage ref", worktree))?;
    Ok(Some((reference, commit)))
}

fn free_ref_name(repo: &Repository, name: &str) -> String {
    let base = format!("{}{name}", super::refs::SALVAGE_PREFIX);
    if repo.find_reference(&base).is_err() {
        return base;
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|candidate| repo.find_reference(candidate).is_err())
        .unwrap_or(base)
}

/// Stages a sparse worktree with `git add -A`: git2 does not honour skip-worktree
/// entries and would record every file outside the cone as deleted. Hardened: no
/// hook, fsmonitor or driver of global or system config runs on the files.
fn stage_sparse(worktree: &Path, placed: &[String]) -> Result<(), Error> {
    let mut command = crate::git::hardened_git();
    command
        .arg("-C")
        .arg(worktree)
        .args(["add", "-A", "--", "."]);
    for path in placed {
        command.arg(format!(":(exclude){path}"));
    }
    let output = command.output().map_err(|e| {
        Error::Git(format!(
            "salvage of {}: cannot run git add: {e}",
            worktree.display()
        ))
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Git(format!(
            "salvage of {}: git add -A failed: {}",
            worktree.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn commit_everything(
    repo: &Repository,
    worktree: &Path,
    message: &str,
    update_ref: Option<&str>,
    placed: &[String],
) -> Result<Option<Oid>, Error> {
    // Every process of the agent is gone by now, so a leftover index.lock is stale.
    let _ = std::fs::remove_file(repo.path().join("index.lock"));
    let mut index = repo
        .index()
        .map_err(git_err("reading the index", worktree))?;
    if repo.path().join("info/sparse-checkout").exists() {
        stage_sparse(worktree, placed)?;
        index
            .read(true)
            .map_err(git_err("reading the index", worktree))?;
    } else {
        let mut skip_placed = |path: &Path, _: &[u8]| -> i32 {
            let placed_here = placed
                .iter()
                .any(|p| path.starts_with(p) || path == Path::new(p.trim_end_matches('/')));
            i32::from(placed_here)
        };
        index
            .add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip_placed))
            .map_err(git_err("adding files", worktree))?;
        index
            .update_all(["*"], None)
            .map_err(git_err("recording deletions", worktree))?;
    }
    index
        .write()
        .map_err(git_err("writing the index", worktree))?;
    crate::faults::point("mid_salvage");
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
        .commit(update_ref, &signature, &signature, message, &tree, &parents)
        .map_err(git_err("committing", worktree))?;
    Ok(Some(commit))
}

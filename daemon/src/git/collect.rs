//! Collect: salvage the worktree, measure the branch, remove the worktree, drop an
//! empty branch. Safe to run again after a crash part-way through.

use super::lane::RepoLane;
use super::salvage::salvage;
use super::worktree;
use crate::error::Error;
use git2::{BranchType, Oid, Repository};
use std::path::PathBuf;

pub struct CollectJob {
    pub agent_id: String,
    /// Paths the worktree setup placed (copies, links): never salvaged.
    pub placed: Vec<String>,
    pub worktree: PathBuf,
    pub branch: String,
    pub base_commit: String,
    pub keep: bool,
    /// Why the worktree is collected (for the salvage commit message).
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Collected {
    pub head_commit: Option<String>,
    pub files_changed: u64,
    pub insertions: u64,
    pub deletions: u64,
    pub branch_exists: bool,
    pub salvaged: bool,
    /// The worktree was removed (not kept).
    pub removed: bool,
}

pub fn collect(lane: &mut RepoLane, job: &CollectJob) -> Result<Collected, Error> {
    let repo = &lane.repo;
    let base = Oid::from_str(&job.base_commit)
        .map_err(|_| Error::Internal(format!("bad base commit {}", job.base_commit)))?;
    let mut result = Collected::default();
    // Every process of the agent is gone and this lane is the only other writer of its
    // branch: a lock left on the branch (a git killed mid-commit, a daemon killed
    // mid-update) is stale and would stop the salvage commit.
    super::worktree::clear_stale_ref_lock(repo, &job.branch);
    if job.worktree.exists() {
        let message = format!(
            "grove: salvage uncommitted work of agent {}\n\n\
             grove committed what the worktree held when the agent {}.",
            job.agent_id, job.reason
        );
        result.salvaged = salvage(&job.worktree, &message, &job.placed)?.is_some();
        preserve_detached_head(repo, job)?;
    }
    let tip = repo
        .find_branch(&job.branch, BranchType::Local)
        .ok()
        .and_then(|b| b.get().target());
    if let Some(tip) = tip {
        let (files, insertions, deletions) = diffstat(repo, base, tip)?;
        result.head_commit = Some(tip.to_string());
        result.files_changed = files;
        result.insertions = insertions;
        result.deletions = deletions;
    }
    if job.keep {
        unlock(repo, &job.worktree);
    } else {
        result.removed = job.worktree.exists();
        worktree::remove(repo, &job.worktree)?;
    }
    result.branch_exists = tip.is_some();
    if tip == Some(base) && !job.keep {
        if let Ok(mut branch) = repo.find_branch(&job.branch, BranchType::Local) {
            branch.delete().map_err(|e| {
                Error::Git(format!(
                    "cannot delete empty branch {}: {}",
                    job.branch,
                    e.message()
                ))
            })?;
        }
        result.branch_exists = false;
    }
    Ok(result)
}

/// A kept worktree no longer belongs to a running agent: its lock would only stop the
/// user from removing it.
fn unlock(repo: &Repository, path: &std::path::Path) {
    if let Some(wt) = worktree::find(repo, path) {
        let _ = wt.unlock();
    }
}

/// If the agent left its worktree on a commit its branch does not contain (a detached
/// HEAD, another branch), keep that commit reachable under `refs/grove/salvage/<id>`.
fn preserve_detached_head(repo: &Repository, job: &CollectJob) -> Result<(), Error> {
    let Ok(wt_repo) = Repository::open(&job.worktree) else {
        return Ok(());
    };
    let Some(head) = wt_repo.head().ok().and_then(|h| h.target()) else {
        return Ok(());
    };
    let tip = repo
        .find_branch(&job.branch, BranchType::Local)
        .ok()
        .and_then(|b| b.get().target());
    let contained = match tip {
        Some(tip) => tip == head || repo.graph_descendant_of(tip, head).unwrap_or(false),
        None => false,
    };
    if !contained {
        let name = format!("refs/grove/salvage/{}", job.agent_id);
        repo.reference(&name, head, true, "grove: agent left HEAD off its branch")
            .map_err(|e| Error::Git(format!("cannot write {name}: {}", e.message())))?;
        tracing::warn!(agent = %job.agent_id, reference = %name, "worktree HEAD was off the agent branch; kept it");
    }
    Ok(())
}

/// Files changed, insertions and deletions of `tip` against its merge-base with `base`.
fn diffstat(repo: &Repository, base: Oid, tip: Oid) -> Result<(u64, u64, u64), Error> {
    let git = |e: git2::Error| Error::Git(format!("diffstat: {}", e.message()));
    let from = repo.merge_base(base, tip).unwrap_or(base);
    let old = repo.find_commit(from).and_then(|c| c.tree()).map_err(git)?;
    let new = repo.find_commit(tip).and_then(|c| c.tree()).map_err(git)?;
    let stats = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .and_then(|d| d.stats())
        .map_err(git)?;
    Ok((
        stats.files_changed() as u64,
        stats.insertions() as u64,
        stats.deletions() as u64,
    ))
}

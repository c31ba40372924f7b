//! Warm-pool worktrees: checked out ahead of time at a base commit, detached and
//! locked, so that a spawn only has to create its branch and attach it.
//!
//! Creation is split in two: registering the worktree (`git worktree add --no-checkout`)
//! touches the repository's shared bookkeeping and runs in the repository's lane; the
//! checkout itself only writes the pool worktree's own index and files, so it runs
//! outside the lane and never holds up other spawns of the same repository.

use super::git_command;
use super::lane::RepoLane;
use super::salvage::salvage_if_dirty;
use super::worktree;
use crate::error::Error;
use git2::Oid;
use std::fs;
use std::path::Path;

/// Directory names of pool worktrees start with this (agent ids are bare hex).
pub const POOL_PREFIX: &str = "pool-";

const POOL_LOCK_REASON: &str = "grove warm pool: no agent uses this worktree yet";

/// True for a warm-pool worktree directory (`<root>/<repo-dir>/pool-<hex>`).
pub fn is_pool_dir(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with(POOL_PREFIX))
}

/// Registers a detached, locked, not yet checked out worktree at `path` on `commit`.
/// In the lane. On failure nothing is left behind.
pub fn register(lane: &RepoLane, path: &Path, commit: Oid) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| Error::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    let output = git_command()
        .arg("-C")
        .arg(&lane.target.workdir)
        .args(["worktree", "add", "--quiet", "--detach", "--no-checkout"])
        .args(["--lock", "--reason", POOL_LOCK_REASON])
        .arg(path)
        .arg(commit.to_string())
        .output()
        .map_err(|e| Error::Git(format!("cannot run git: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let _ = worktree::remove(&lane.repo, path);
    Err(Error::Git(format!(
        "git worktree add {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Checks out a registered pool worktree at `commit`, or clones it from the template of
/// that commit where there is one (copy-on-write: a pool worktree then costs per-file
/// metadata, not a checkout). Outside the lane. Returns whether it was cloned.
/// `git reset --hard` is the checkout `git worktree add` itself runs: parallel workers,
/// the user's filters, and an index with its cache tree written, so the agent's first
/// `git status` is fast.
pub fn fill(path: &Path, commit: Oid, workers: usize) -> Result<bool, Error> {
    let template = super::clone_checkout::usable_template(path, commit);
    let admin = crate::worktree_root::admin_dir(path);
    if let Some((template, admin)) = template.zip(admin) {
        match super::clone_checkout::clone_into(&template, path, &admin.join("index")) {
            Ok(()) => return Ok(true),
            // A template removed meanwhile: check out instead, over nothing half cloned.
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot clone the template; checking out");
                super::own_repo::clear_but_git(path)?;
            }
        }
    }
    super::run_checkout(path, workers, &["reset", "--hard", "--quiet"])?;
    Ok(false)
}

/// Moves a pool worktree to another commit (its base moved). Outside the lane; only
/// the files that differ are rewritten.
pub fn refresh(path: &Path, commit: &str, workers: usize) -> Result<(), Error> {
    super::run_checkout(path, workers, &["checkout", "--quiet", "--detach", commit])
}

/// What a spawn takes from the pool.
#[derive(Debug, Clone)]
pub struct Taken {
    pub path: std::path::PathBuf,
    /// The commit it is checked out at.
    pub commit: String,
}

/// Turns the pool worktree `taken` into an agent's worktree: at `base` (checking out
/// the difference first if the base moved since the pool was filled), moved to `path`,
/// on a new `branch`, locked for the agent. In the lane. On failure the pool worktree
/// is gone too (it held no work) and no branch remains.
pub fn adopt(
    lane: &RepoLane,
    taken: &Taken,
    path: &Path,
    branch: &str,
    base: Oid,
    reason: &str,
    workers: usize,
) -> Result<(), Error> {
    let result = attach(lane, taken, path, branch, base, reason, workers);
    if result.is_err() {
        worktree::rollback(&lane.repo, path, branch);
        if taken.path.exists() {
            let _ = discard(lane, &taken.path);
        }
    }
    result
}

fn attach(
    lane: &RepoLane,
    taken: &Taken,
    path: &Path,
    branch: &str,
    base: Oid,
    reason: &str,
    workers: usize,
) -> Result<(), Error> {
    if taken.commit != base.to_string() {
        refresh(&taken.path, &base.to_string(), workers)?;
    }
    let name = worktree::find(&lane.repo, &taken.path)
        .and_then(|wt| wt.name().map(str::to_string))
        .ok_or_else(|| {
            Error::Git(format!(
                "pool worktree {} is not registered with git",
                taken.path.display()
            ))
        })?;
    worktree::create_branch(&lane.repo, branch, base)?;
    // What `git worktree move` does: the directory, then git's pointer back to it.
    fs::rename(&taken.path, path).map_err(|e| {
        Error::Git(format!(
            "cannot move {} to {}: {e}",
            taken.path.display(),
            path.display()
        ))
    })?;
    crate::faults::point("mid_pool_adopt");
    let admin = lane.repo.commondir().join("worktrees").join(&name);
    write_file(
        &admin.join("gitdir"),
        &format!("{}\n", path.join(".git").display()),
    )?;
    // Same commit, so index and files stay valid: only HEAD changes.
    write_file(&admin.join("HEAD"), &format!("ref: refs/heads/{branch}\n"))?;
    write_file(&admin.join("locked"), reason)?;
    crate::faults::point("after_worktree_add");
    Ok(())
}

/// Replaces a small git bookkeeping file atomically.
fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    let tmp = path.with_extension("grove-tmp");
    fs::write(&tmp, text)
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| Error::Git(format!("cannot write {}: {e}", path.display())))
}

/// Removes a pool worktree. In the lane. It never held an agent's work, but someone may
/// have written into it: anything it holds is committed to `refs/grove/salvage/<dir>`
/// first, as for any worktree grove removes (unless its checkout never finished).
/// Returns that ref when there was something, and the files, to be deleted outside
/// the lane.
pub fn discard(
    lane: &RepoLane,
    path: &Path,
) -> Result<(Option<String>, Option<worktree::Trash>), Error> {
    // Without an index the checkout never finished: the files are git's, half written.
    let checked_out =
        crate::worktree_root::admin_dir(path).is_some_and(|admin| admin.join("index").exists());
    let salvaged = if checked_out {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "pool".into());
        salvage_if_dirty(path, &name)?.map(|(reference, _)| reference)
    } else {
        None
    };
    let trash = worktree::take_out(&lane.repo, path)?;
    Ok((salvaged, trash))
}

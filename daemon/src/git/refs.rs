//! Salvage refs: listing them and bringing one back as a branch and worktree.

use super::lane::RepoLane;
use crate::error::Error;
use grove_proto::types::SalvageRef;
use std::path::Path;

pub use grove_proto::git::SALVAGE_PREFIX;

pub fn list(lane: &RepoLane) -> Result<Vec<SalvageRef>, Error> {
    let repo = &lane.repo;
    let refs = repo
        .references_glob(&format!("{SALVAGE_PREFIX}*"))
        .map_err(|e| Error::Git(format!("listing salvage refs: {}", e.message())))?;
    let mut found = Vec::new();
    for reference in refs.flatten() {
        let (Some(name), Ok(commit)) = (reference.name(), reference.peel_to_commit()) else {
            continue;
        };
        found.push(SalvageRef {
            repo: lane.target.workdir.clone(),
            name: name.to_string(),
            commit: commit.id().to_string(),
            time_ms: (commit.time().seconds().max(0) as u64) * 1000,
            subject: commit.summary().unwrap_or("").to_string(),
        });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// A salvage ref checked out again, ready to be tracked like an agent's worktree.
pub struct Restored {
    pub branch: String,
    /// The salvage commit: the branch's tip.
    pub commit: String,
    /// Where the work forked from the repository's HEAD (what `grove diff` compares with).
    pub base_commit: String,
    /// What the base is called: HEAD's branch, or the commit.
    pub base_ref: String,
}

/// The salvage ref `reference` names (`refs/grove/salvage/<name>` or just `<name>`).
fn salvage_commit<'r>(
    lane: &'r RepoLane,
    reference: &str,
) -> Result<(String, git2::Commit<'r>), Error> {
    let full = if reference.starts_with(SALVAGE_PREFIX) {
        reference.to_string()
    } else {
        format!("{SALVAGE_PREFIX}{reference}")
    };
    let commit = lane
        .repo
        .find_reference(&full)
        .and_then(|r| r.peel_to_commit())
        .map_err(|_| {
            Error::NotFound(format!(
                "no salvage ref `{full}` in {}; `grove salvaged` lists them",
                lane.target.workdir.display()
            ))
        })?;
    Ok((full, commit))
}

/// Creates branch `grove/restored-<name>` at the salvage ref and checks it out at
/// `path` (under grove's worktree root, where grove tracks it like a kept agent
/// worktree: salvaged before any removal). Hardened: the commit holds what an agent
/// left. On failure nothing is left behind.
pub fn restore(
    lane: &RepoLane,
    reference: &str,
    path: &Path,
    checkout_workers: usize,
) -> Result<Restored, Error> {
    let (full, commit) = salvage_commit(lane, reference)?;
    let name = full.trim_start_matches(SALVAGE_PREFIX).replace('/', "-");
    let branch = free_branch(lane, &format!("grove/restored-{name}"));
    if path.exists() {
        return Err(Error::BadInput(format!(
            "{} already exists; move it away first",
            path.display()
        )));
    }
    let (base_commit, base_ref) = fork_point(lane, &commit);
    super::worktree::create(
        lane,
        path,
        &branch,
        commit.id(),
        "grove: restored salvage",
        checkout_workers,
        &[],
    )?;
    // Like a kept worktree: the lock would only stop the user from removing it.
    if let Some(wt) = super::worktree::find(&lane.repo, path) {
        let _ = wt.unlock();
    }
    Ok(Restored {
        branch,
        commit: commit.id().to_string(),
        base_commit,
        base_ref,
    })
}

/// Where `commit` forked from the repository's HEAD, and HEAD's name; without a
/// common history, its first parent (or itself).
fn fork_point(lane: &RepoLane, commit: &git2::Commit<'_>) -> (String, String) {
    let head = lane.repo.head().ok();
    let head_commit = head.as_ref().and_then(|h| h.target());
    if let Some(fork) = head_commit.and_then(|h| lane.repo.merge_base(h, commit.id()).ok()) {
        let name = match head.as_ref().and_then(|h| h.shorthand()) {
            Some(short) if head.as_ref().is_some_and(|h| h.is_branch()) => short.to_string(),
            _ => fork.to_string(),
        };
        return (fork.to_string(), name);
    }
    let fork = commit.parent_id(0).unwrap_or(commit.id()).to_string();
    (fork.clone(), fork)
}

fn free_branch(lane: &RepoLane, base: &str) -> String {
    let taken = |name: &str| lane.repo.find_branch(name, git2::BranchType::Local).is_ok();
    if !taken(base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or_else(|| base.to_string())
}

/// Deletes `refs/grove/salvage/discarded-*` refs (left by `grove discard`) whose loose
/// ref file is older than `older_than`; returns their names. A packed ref has no date of
/// its own and is kept.
pub fn expire_discarded(
    lane: &RepoLane,
    older_than: std::time::SystemTime,
    dry_run: bool,
) -> Result<Vec<String>, Error> {
    let common = lane.repo.commondir().to_path_buf();
    let refs = lane
        .repo
        .references_glob(&format!("{SALVAGE_PREFIX}discarded-*"))
        .map_err(|e| Error::Git(format!("listing discarded refs: {}", e.message())))?;
    let names: Vec<String> = refs
        .flatten()
        .filter_map(|r| r.name().map(String::from))
        .collect();
    let mut expired = Vec::new();
    for name in names {
        let written = std::fs::metadata(common.join(&name)).and_then(|m| m.modified());
        if !written.is_ok_and(|t| t < older_than) {
            continue;
        }
        if !dry_run {
            if let Ok(mut reference) = lane.repo.find_reference(&name) {
                reference
                    .delete()
                    .map_err(|e| Error::Git(format!("deleting {name}: {}", e.message())))?;
            }
        }
        expired.push(name);
    }
    Ok(expired)
}

/// What `discard` found: the branch deleted with its tip kept, or no branch to delete.
pub enum Discard {
    Done { commit: String, salvage_ref: String },
    Gone,
}

/// Keeps the tip of agent `id`'s `branch` under its `discarded-<id>` salvage ref, then
/// deletes the branch: if the delete fails, nothing is lost either way. Refused while
/// any worktree (the main one included) has the branch checked out.
pub fn discard(lane: &RepoLane, id: &str, branch: &str) -> Result<Discard, Error> {
    let repo = &lane.repo;
    let Ok(mut local) = repo.find_branch(branch, git2::BranchType::Local) else {
        return Ok(Discard::Gone);
    };
    let Some(tip) = local.get().target() else {
        return Ok(Discard::Gone);
    };
    let full = format!("refs/heads/{branch}");
    if let Some(at) = checked_out_at(lane, &full) {
        return Err(Error::InvalidState(format!(
            "{branch} is checked out in {}; remove that worktree first (`grove rm {id}` for \
             a kept one)",
            at.display()
        )));
    }
    let salvage_ref = grove_proto::git::discarded_ref(id);
    repo.reference(
        &salvage_ref,
        tip,
        true,
        &format!("grove: discard agent {id} ({branch})"),
    )
    .map_err(|e| {
        Error::Git(format!(
            "keeping {branch} at {salvage_ref}: {}",
            e.message()
        ))
    })?;
    local
        .delete()
        .map_err(|e| Error::Git(format!("deleting {branch}: {}", e.message())))?;
    Ok(Discard::Done {
        commit: tip.to_string(),
        salvage_ref,
    })
}

/// The worktree whose HEAD is `full_ref`. A linked worktree's HEAD is read from its
/// administrative directory, so that one whose directory is gone (not yet pruned, which
/// git still counts as checked out) is found too.
pub(super) fn checked_out_at(lane: &RepoLane, full_ref: &str) -> Option<std::path::PathBuf> {
    let points_here = |head: &Path| {
        std::fs::read_to_string(head)
            .is_ok_and(|text| text.trim().strip_prefix("ref: ") == Some(full_ref))
    };
    let common = lane.repo.commondir();
    if points_here(&common.join("HEAD")) {
        return Some(lane.target.workdir.clone());
    }
    let names = lane.repo.worktrees().ok()?;
    names.iter().flatten().find_map(|name| {
        points_here(&common.join("worktrees").join(name).join("HEAD")).then(|| {
            lane.repo
                .find_worktree(name)
                .map(|wt| wt.path().to_path_buf())
                .unwrap_or_else(|_| common.join("worktrees").join(name))
        })
    })
}

//! Salvage refs: listing them and bringing one back as a branch and worktree.

use super::git_command;
use super::lane::RepoLane;
use crate::error::Error;
use grove_proto::types::SalvageRef;
use std::path::PathBuf;

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

/// Creates branch `grove/restored-<name>` at the salvage ref and checks it out next to
/// the repository (`<repo>.restored-<name>`), outside grove's worktree root, so that no
/// clean-up ever takes it away again.
pub fn restore(lane: &RepoLane, reference: &str) -> Result<(String, PathBuf), Error> {
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
    let name = full.trim_start_matches(SALVAGE_PREFIX).replace('/', "-");
    let branch = free_branch(lane, &format!("grove/restored-{name}"));
    let workdir = &lane.target.workdir;
    let repo_name = workdir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    let path = workdir.with_file_name(format!("{repo_name}.{}", branch.replace('/', "-")));
    if path.exists() {
        return Err(Error::BadInput(format!(
            "{} already exists; move it away first",
            path.display()
        )));
    }
    let output = git_command()
        .arg("-C")
        .arg(workdir)
        .args(["worktree", "add", "--quiet", "-b", &branch])
        .arg(&path)
        .arg(commit.id().to_string())
        .output()
        .map_err(|e| Error::Git(format!("cannot run git: {e}")))?;
    if !output.status.success() {
        return Err(Error::Git(format!(
            "git worktree add {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok((branch, path))
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

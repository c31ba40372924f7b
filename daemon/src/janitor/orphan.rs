//! Worktrees under the root that no agent record owns.

use super::Janitor;
use crate::error::Error;
use crate::git::salvage::salvage_orphan;
use crate::git::target::resolve_repo;
use crate::git::worktree;
use grove_proto::now_ms;
use grove_proto::types::Removal;
use std::path::{Path, PathBuf};

/// True when `dir` is a linked git worktree (a `.git` file, not a repository of its own).
pub fn is_linked_worktree(dir: &Path) -> bool {
    dir.join(".git").is_file()
}

/// Processes that work in `dir` (their working directory is in it) or belong to the
/// agent it was made for (the cgroup named after it, which an agent cannot leave).
pub(super) fn processes_in(dir: &Path) -> Vec<u32> {
    use grove_sys::proc;
    let cgroup = dir
        .file_name()
        .map(|name| format!("/grove/{}", name.to_string_lossy()));
    proc::all_pids()
        .into_iter()
        .filter(|&pid| {
            proc::cwd(pid).is_some_and(|cwd| cwd.starts_with(dir))
                || cgroup
                    .as_deref()
                    .is_some_and(|own| proc::cgroup(pid).is_some_and(|c| c.ends_with(own)))
        })
        .collect()
}

impl Janitor {
    /// Salvages an unknown worktree to `refs/grove/salvage/<dir>` and removes it.
    pub(super) async fn remove_orphan(
        &self,
        dir: PathBuf,
        reason: String,
    ) -> Result<Removal, Error> {
        if crate::git::own_repo::is_own_repo(&dir) {
            // A jailed agent's repository: its commits live only there, and no record
            // says which branch of which repository they belong to.
            return Err(Error::InvalidState(format!(
                "{} is a jailed agent's repository that no record owns; left in place \
                 (its commits are only there: `git -C <repo> fetch {} <branch>` brings \
                 them in, then delete it)",
                dir.display(),
                dir.display()
            )));
        }
        let alive = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || processes_in(&dir)
        })
        .await
        .unwrap_or_default();
        if !alive.is_empty() {
            // An agent this daemon has no record of (an empty or replaced database) may
            // still be writing here: removing it would lose what it writes next.
            return Err(Error::InvalidState(format!(
                "{} has no agent record, but processes still run in it (pid {}); left in \
                 place",
                dir.display(),
                alive
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if !is_linked_worktree(&dir) {
            return Err(Error::InvalidState(format!(
                "{} is not a git worktree; left in place (grove cannot salvage it)",
                dir.display()
            )));
        }
        let probe = dir.clone();
        let target = tokio::task::spawn_blocking(move || resolve_repo(&probe)).await??;
        let repo = target.workdir.clone();
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "worktree".into());
        let (removal, trash) = self
            .lanes
            .run(&target, move |lane| {
                let salvaged = salvage_orphan(&dir, &name)?;
                let trash = worktree::take_out(&lane.repo, &dir)?;
                let removal = Removal {
                    at_ms: now_ms(),
                    path: dir,
                    reason,
                    agent_id: None,
                    repo: Some(repo),
                    salvage_ref: salvaged.as_ref().map(|(r, _)| r.clone()),
                    salvage_commit: salvaged.map(|(_, c)| c.to_string()),
                };
                Ok((removal, trash))
            })
            .await?;
        // Outside the lane, and before the removal is reported: its space is free then.
        if let Some(trash) = trash {
            let _ = tokio::task::spawn_blocking(move || trash.delete()).await;
        }
        self.log_removal(removal.clone()).await;
        Ok(removal)
    }
}

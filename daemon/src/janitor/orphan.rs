//! Worktrees under the root that no agent record owns.

use super::Janitor;
use crate::error::Error;
use crate::git::salvage::salvage_orphan;
use crate::git::target::resolve_repo;
use crate::git::worktree;
use grove_agent_shim::now_ms;
use grove_proto::types::Removal;
use std::path::{Path, PathBuf};

/// True when `dir` is a linked git worktree (a `.git` file, not a repository of its own).
pub fn is_linked_worktree(dir: &Path) -> bool {
    dir.join(".git").is_file()
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
        let removal = self
            .lanes
            .run(&target, move |lane| {
                let salvaged = salvage_orphan(&dir, &name)?;
                worktree::remove(&lane.repo, &dir)?;
                Ok(Removal {
                    at_ms: now_ms(),
                    path: dir,
                    reason,
                    agent_id: None,
                    repo: Some(repo),
                    salvage_ref: salvaged.as_ref().map(|(r, _)| r.clone()),
                    salvage_commit: salvaged.map(|(_, c)| c.to_string()),
                })
            })
            .await?;
        self.log_removal(removal.clone()).await;
        Ok(removal)
    }
}

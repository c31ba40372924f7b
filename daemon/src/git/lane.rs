//! One serialized lane per repository: git takes locks under `.git` (config, refs,
//! worktrees), so creating two worktrees of one repository at once races. Each lane is a
//! thread that owns the repository and does its git work one job at a time; different
//! repositories proceed in parallel.

use super::target::RepoTarget;
use crate::error::Error;
use crate::owner::Owner;
use git2::Repository;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub struct RepoLane {
    pub repo: Repository,
    pub target: RepoTarget,
}

#[derive(Clone, Default)]
pub struct Lanes {
    lanes: Arc<Mutex<HashMap<PathBuf, Owner<RepoLane>>>>,
}

impl Lanes {
    /// The lane of `target`, started on first use.
    pub fn get(&self, target: &RepoTarget) -> Result<Owner<RepoLane>, Error> {
        let mut lanes = self
            .lanes
            .lock()
            .map_err(|_| Error::Internal("lane table poisoned".into()))?;
        if let Some(lane) = lanes.get(&target.common_dir) {
            return Ok(lane.clone());
        }
        let for_thread = target.clone();
        let lane = Owner::spawn("grove-repo-lane", move || {
            Repository::open(&for_thread.common_dir)
                .map(|repo| RepoLane {
                    repo,
                    target: for_thread.clone(),
                })
                .map_err(|e| {
                    Error::Git(format!(
                        "cannot open repository {}: {}",
                        for_thread.common_dir.display(),
                        e.message()
                    ))
                })
        })?;
        lanes.insert(target.common_dir.clone(), lane.clone());
        Ok(lane)
    }

    /// Runs `f` in the lane of `target`.
    pub async fn run<R: Send + 'static>(
        &self,
        target: &RepoTarget,
        f: impl FnOnce(&mut RepoLane) -> Result<R, Error> + Send + 'static,
    ) -> Result<R, Error> {
        let lane = self.get(target)?;
        lane.call(f)
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
    }
}

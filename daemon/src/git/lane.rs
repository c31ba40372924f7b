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
    /// The lane of `target`, started on first use. The repository is opened outside
    /// the table's lock, so that a slow open never holds up the other repositories;
    /// when two callers race, the first lane in the table wins and the other ends.
    pub fn get(&self, target: &RepoTarget) -> Result<Owner<RepoLane>, Error> {
        let table = || {
            self.lanes
                .lock()
                .map_err(|_| Error::Internal("lane table poisoned".into()))
        };
        if let Some(lane) = table()?.get(&target.common_dir) {
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
        Ok(table()?
            .entry(target.common_dir.clone())
            .or_insert(lane)
            .clone())
    }

    /// Runs `f` in the lane of `target`.
    pub async fn run<R: Send + 'static>(
        &self,
        target: &RepoTarget,
        f: impl FnOnce(&mut RepoLane) -> Result<R, Error> + Send + 'static,
    ) -> Result<R, Error> {
        let lane = self.get(target)?;
        lane.call(f).await?
    }
}

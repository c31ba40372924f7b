//! One serialized lane per repository: git takes locks under `.git` (config, refs,
//! worktrees), so creating two worktrees of one repository at once races. Each lane is a
//! thread that owns the repository and does its git work one job at a time; different
//! repositories proceed in parallel.

use super::target::RepoTarget;
use crate::error::Error;
use crate::owner::{Idle, Owner};
use git2::Repository;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct RepoLane {
    pub repo: Repository,
    pub target: RepoTarget,
}

/// What a lane thread owns: its repository while in use. An open repository keeps its
/// packs and their indexes mapped (on a big repository, most of the daemon's resident
/// memory), so a lane idle for `repo_idle_release` closes it and the next job reopens
/// it.
pub struct LaneSlot {
    target: RepoTarget,
    open: Option<RepoLane>,
}

impl LaneSlot {
    fn lane(&mut self) -> Result<&mut RepoLane, Error> {
        let lane = match self.open.take() {
            Some(lane) => lane,
            None => open(&self.target)?,
        };
        Ok(self.open.insert(lane))
    }

    fn release(&mut self) {
        if self.open.take().is_some() {
            // What the work on it allocated is free now; the allocator would keep it.
            grove_sys::memory::release_free_heap();
            tracing::debug!(repo = %self.target.common_dir.display(), "idle repository closed");
        }
    }
}

fn open(target: &RepoTarget) -> Result<RepoLane, Error> {
    Repository::open(&target.common_dir)
        .map(|repo| RepoLane {
            repo,
            target: target.clone(),
        })
        .map_err(|e| {
            Error::Git(format!(
                "cannot open repository {}: {}",
                target.common_dir.display(),
                e.message()
            ))
        })
}

#[derive(Clone)]
pub struct Lanes {
    lanes: Arc<Mutex<HashMap<PathBuf, Owner<LaneSlot>>>>,
    /// How long a lane keeps its repository open after its last job.
    idle_release: Duration,
    /// Where the files of the worktrees the lanes take out go to be deleted, so that
    /// no lane spends its turns deleting.
    deleter: super::deleter::Deleter,
}

impl Lanes {
    pub fn new(idle_release: Duration, deleter: super::deleter::Deleter) -> Lanes {
        Lanes {
            lanes: Arc::default(),
            idle_release,
            deleter,
        }
    }

    pub fn deleter(&self) -> &super::deleter::Deleter {
        &self.deleter
    }

    /// The lane of `target`, started on first use. The repository is opened outside
    /// the table's lock, so that a slow open never holds up the other repositories, and
    /// on a blocking thread, so that no runtime worker (there are two) waits for it;
    /// when two callers race, the first lane in the table wins and the other ends.
    pub async fn get(&self, target: &RepoTarget) -> Result<Owner<LaneSlot>, Error> {
        let table = || {
            self.lanes
                .lock()
                .map_err(|_| Error::Poisoned("the lane table"))
        };
        if let Some(lane) = table()?.get(&target.common_dir) {
            return Ok(lane.clone());
        }
        let for_thread = target.clone();
        let idle = Idle {
            after: self.idle_release,
            release: LaneSlot::release,
        };
        let lane = tokio::task::spawn_blocking(move || {
            Owner::spawn_with_idle(
                "grove-repo-lane",
                move || {
                    // Opened at once: a repository that cannot be opened is the caller's
                    // error, not a later job's.
                    let open = Some(open(&for_thread)?);
                    Ok::<_, Error>(LaneSlot {
                        target: for_thread,
                        open,
                    })
                },
                Some(idle),
            )
        })
        .await??;
        Ok(table()?
            .entry(target.common_dir.clone())
            .or_insert(lane)
            .clone())
    }

    /// Runs `f` in the lane of `target`, its repository (re)opened first if idle closed it.
    pub async fn run<R: Send + 'static>(
        &self,
        target: &RepoTarget,
        f: impl FnOnce(&mut RepoLane) -> Result<R, Error> + Send + 'static,
    ) -> Result<R, Error> {
        let lane = self.get(target).await?;
        lane.call(move |slot| f(slot.lane()?)).await?
    }
}

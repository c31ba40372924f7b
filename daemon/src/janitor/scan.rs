//! The start-up scan: make the disk and git's worktree metadata agree with the agent
//! records. It runs in the janitor's task while the daemon already serves (the first
//! thing that task does, so a `grove gc` waits for it).

use super::Janitor;
use crate::core::WorktreeUse;
use crate::git::pool::is_pool_dir;
use crate::git::target::resolve_repo;
use crate::git::worktree;
use crate::worktree_root::worktree_dirs;
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

impl Janitor {
    /// Returns the unknown worktrees kept because processes still run in them, with
    /// those processes: each is removed once they have ended.
    pub async fn startup_scan(&self) -> Vec<(PathBuf, Vec<u32>)> {
        crate::faults::hold("startup_scan").await;
        // Directories first, records second: a directory is only ever created after its
        // record exists, so nothing being prepared right now can look like an orphan.
        for trash in crate::worktree_root::find_trash(&self.config.dirs.worktree_root) {
            tracing::info!(path = %trash.display(), "start-up scan: deleting a removed worktree's files");
            self.lanes.deleter().delete(worktree::Trash::found(trash));
        }
        let dirs = worktree_dirs(&self.config.dirs.worktree_root);
        let Ok(uses) = self.core.worktrees().await else {
            return Vec::new();
        };
        let owned: HashSet<&PathBuf> = uses.iter().map(|u| &u.worktree).collect();
        // Warm-pool worktrees belong to the core, which removes an earlier daemon's.
        let unknown = dirs
            .into_iter()
            .filter(|d| !owned.contains(d) && !is_pool_dir(d));
        let mut freed = false;
        let mut alive = Vec::new();
        for dir in unknown {
            let probe = dir.clone();
            let pids = tokio::task::spawn_blocking(move || super::orphan::processes_in(&probe))
                .await
                .unwrap_or_default();
            if !pids.is_empty() {
                // An agent this daemon has no record of (an empty or replaced database)
                // still works here: removing it would lose what it writes next.
                tracing::warn!(
                    path = %dir.display(),
                    ?pids,
                    "start-up scan: kept an unknown worktree, processes still run in it; \
                     it is salvaged and removed once they have ended"
                );
                alive.push((dir, pids));
                continue;
            }
            let reason = "orphan at start-up: no agent record owns it".to_string();
            match self.remove_orphan(dir.clone(), reason).await {
                Ok(removal) => {
                    freed = true;
                    tracing::warn!(
                        path = %dir.display(),
                        salvage_ref = ?removal.salvage_ref,
                        "start-up scan: salvaged and removed an unknown worktree"
                    )
                }
                Err(e) => {
                    tracing::warn!(path = %dir.display(), error = %e, "start-up scan: left an unknown directory")
                }
            }
        }
        if freed {
            // The queue was admitted against a root that still held them; no other
            // event would start the agents waiting for these slots.
            self.core.slots_freed().await;
        }
        let (live, finished): (Vec<&WorktreeUse>, Vec<&WorktreeUse>) =
            uses.iter().partition(|u| u.live);
        let paths =
            |uses: Vec<&WorktreeUse>| uses.into_iter().map(|u| u.worktree.clone()).collect();
        let (live, finished) = (paths(live), paths(finished));
        let repos: BTreeSet<PathBuf> = uses.iter().map(|u| u.repo.clone()).collect();
        for repo in repos {
            self.tidy_repo(repo, &live, &finished).await;
        }
        // Trust entries of worktrees a crash removed before their entry went.
        let state_dir = self.config.dirs.state_dir.clone();
        let sweep = move || crate::supervisor::cli_trust::sweep(&state_dir);
        let _ = tokio::task::spawn_blocking(sweep).await;
        alive
    }

    /// Prunes metadata of grove worktrees whose directory is gone and unlocks worktrees
    /// whose agent no longer runs. Worktrees outside grove's root are never touched.
    async fn tidy_repo(&self, repo: PathBuf, live: &HashSet<PathBuf>, finished: &HashSet<PathBuf>) {
        let probe = repo.clone();
        let Ok(Ok(target)) = tokio::task::spawn_blocking(move || resolve_repo(&probe)).await else {
            tracing::info!(repo = %repo.display(), "start-up scan: repository is gone; skipped");
            return;
        };
        let root = self.config.dirs.worktree_root.clone();
        let (live, finished) = (live.clone(), finished.clone());
        let notes = self
            .lanes
            .run(&target, move |lane| {
                Ok(worktree::tidy_metadata(&lane.repo, &root, &live, &finished))
            })
            .await
            .unwrap_or_default();
        for note in notes {
            tracing::info!(repo = %repo.display(), "start-up scan: {note}");
        }
    }
}

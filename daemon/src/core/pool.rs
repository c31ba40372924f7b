//! The warm pool: per repository that had a spawn within `pool_idle`, up to `pool_size`
//! worktrees checked out ahead of time at the base that repository's spawns use. A
//! spawn takes one (create the branch, attach, relock) instead of checking out.
//!
//! Pool worktrees count inside `max_worktrees` and are the first thing to go: when an
//! agent needs a slot, when the disk is under pressure, when their repository has been
//! quiet for `pool_idle`. They refill in the background, never while agents wait for a
//! slot or the disk is fuller than `disk_high`. A spawn gets a pool worktree at its own
//! base commit; one filled at an older commit is checked forward first, so nothing
//! stale is ever handed out. Pool worktrees left by an earlier daemon are removed
//! (salvaged first) rather than trusted.

use super::{Core, Msg};
use crate::error::Error;
use crate::git::pool::{self, Taken, POOL_PREFIX};
use crate::git::target::{resolve_repo, RepoTarget};
use crate::ids::random_hex;
use crate::worktree_root::worktree_dirs;
use grove_proto::methods::PoolWorktree;
use grove_proto::types::AgentRecord;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use tokio::sync::oneshot;
use tokio::time::Instant;

#[derive(Default)]
pub(super) struct Pool {
    /// Keyed by the repository's main worktree (`AgentRecord::repo`).
    repos: HashMap<PathBuf, RepoPool>,
    /// Removals under way; their directories still count as slots until they are gone.
    evicting: HashSet<PathBuf>,
    /// Callers waiting for every removal and fill under way to finish (disk pressure,
    /// shutdown).
    drained: Vec<oneshot::Sender<()>>,
    /// The daemon is stopping: no more fills.
    closed: bool,
}

struct RepoPool {
    target: RepoTarget,
    /// The commit the latest spawn's base named.
    base_commit: String,
    /// `None` once the repository has been quiet for `pool_idle`.
    last_spawn: Option<Instant>,
    entries: Vec<Entry>,
    /// A fill failed: no refill until the next spawn here, so a broken repository
    /// cannot turn the pool into a retry loop.
    stalled: bool,
}

struct Entry {
    path: PathBuf,
    /// The commit it is checked out at (or being checked out at).
    commit: String,
    ready: bool,
}

impl Core {
    /// A spawn in `target` at `base_commit`: keep this repository's pool warm at that base.
    pub(super) fn pool_note_spawn(&mut self, target: &RepoTarget, base_commit: &str) {
        if self.config.pool_size == 0 {
            return;
        }
        let repo = self
            .pool
            .repos
            .entry(target.workdir.clone())
            .or_insert_with(|| RepoPool {
                target: target.clone(),
                base_commit: String::new(),
                last_spawn: None,
                entries: Vec::new(),
                stalled: false,
            });
        repo.base_commit = base_commit.to_string();
        repo.last_spawn = Some(Instant::now());
        repo.stalled = false;
    }

    /// Whether `record` could start in a pool worktree right now.
    pub(super) fn pool_has_ready(&self, record: &AgentRecord) -> bool {
        record.sparse.is_empty()
            && self.disk_hold.is_none()
            && self
                .pool
                .repos
                .get(&record.repo)
                .is_some_and(|repo| repo.entries.iter().any(|e| e.ready))
    }

    /// Whether any ready pool worktree could be evicted to free a slot.
    pub(super) fn pool_has_evictable(&self) -> bool {
        self.pool
            .repos
            .values()
            .any(|repo| repo.entries.iter().any(|e| e.ready))
    }

    /// Takes a ready pool worktree for `record`, one at its base commit if there is one.
    pub(super) fn pool_take(&mut self, record: &AgentRecord) -> Option<Taken> {
        if !self.pool_has_ready(record) {
            return None;
        }
        let repo = self.pool.repos.get_mut(&record.repo)?;
        let index = repo
            .entries
            .iter()
            .position(|e| e.ready && e.commit == record.base_commit)
            .or_else(|| repo.entries.iter().position(|e| e.ready))?;
        let entry = repo.entries.remove(index);
        tracing::debug!(agent = %record.id, pool = %entry.path.display(), "taking a warm-pool worktree");
        Some(Taken {
            path: entry.path,
            commit: entry.commit,
        })
    }

    /// Pool worktrees that hold a slot but are not on disk yet (being registered).
    pub(super) fn pool_slots_not_on_disk(&self, on_disk: &HashSet<PathBuf>) -> usize {
        self.pool
            .repos
            .values()
            .flat_map(|repo| &repo.entries)
            .filter(|e| !on_disk.contains(&e.path))
            .count()
    }

    /// Whether `dir` is (or is being made as) a warm-pool worktree.
    pub(super) fn pool_holds(&self, dir: &std::path::Path) -> bool {
        self.pool
            .repos
            .values()
            .any(|repo| repo.entries.iter().any(|e| e.path == dir))
    }

    /// Tops up the pools of recently active repositories, and moves ready worktrees
    /// whose base moved to the new base. Only with slots to spare, nobody waiting for
    /// one, and the disk under `disk_high`.
    pub(super) fn pool_refill(&mut self) {
        let size = self.config.pool_size;
        if size == 0
            || self.pool.closed
            || self.disk_hold.is_some()
            || !self.queue.is_empty()
            || self.disk_is_high()
        {
            return;
        }
        let keys: Vec<PathBuf> = self.pool.repos.keys().cloned().collect();
        // Read once for the pass: a fill started here counts as a pool slot not on
        // disk yet, so the count stays right without reading the root again.
        let on_disk = self.worktrees_on_disk().clone();
        for key in keys {
            self.pool_refresh_moved(&key);
            while let Some(repo) = self.pool.repos.get(&key) {
                let wanted = repo.last_spawn.is_some() && !repo.stalled;
                if !wanted || repo.entries.len() >= size || !self.has_free_slot_with(&on_disk) {
                    break;
                }
                if self.pool_start_fill(&key).is_err() {
                    break;
                }
            }
        }
    }

    fn disk_is_high(&self) -> bool {
        crate::worktree_root::usage(&self.config.dirs.worktree_root)
            .is_ok_and(|used| used > self.config.disk_high)
    }

    fn pool_start_fill(&mut self, key: &Path) -> Result<(), Error> {
        let hex = random_hex(4).map_err(Error::Randomness)?;
        let name = format!("{POOL_PREFIX}{hex}");
        let root = self.config.dirs.worktree_root.clone();
        let Some(repo) = self.pool.repos.get_mut(key) else {
            return Ok(());
        };
        let path = root.join(&repo.target.dir_name).join(name);
        let commit = repo.base_commit.clone();
        repo.entries.push(Entry {
            path: path.clone(),
            commit: commit.clone(),
            ready: false,
        });
        let (target, lanes, tx) = (repo.target.clone(), self.lanes.clone(), self.tx.clone());
        let workers = self.config.checkout_workers;
        tokio::spawn(async move {
            let result = async {
                let oid = git2::Oid::from_str(&commit).map_err(|source| Error::BadCommitId {
                    what: "base commit",
                    text: commit.clone(),
                    source,
                })?;
                let at = path.clone();
                lanes
                    .run(&target, move |lane| pool::register(lane, &at, oid))
                    .await?;
                let at = path.clone();
                let cloned =
                    tokio::task::spawn_blocking(move || pool::fill(&at, oid, workers)).await??;
                if !cloned {
                    make_template(&target.common_dir, &path, oid, workers);
                }
                Ok(())
            }
            .await;
            let _ = tx
                .send(Msg::PoolFilled(path, result.map(|()| commit)))
                .await;
        });
        Ok(())
    }

    /// Ready worktrees at another commit than the latest spawn's base are checked
    /// forward in the background, so the next spawn finds them at its base.
    fn pool_refresh_moved(&mut self, key: &Path) {
        let workers = self.config.checkout_workers;
        let tx = self.tx.clone();
        let Some(repo) = self.pool.repos.get_mut(key) else {
            return;
        };
        if repo.last_spawn.is_none() {
            return;
        }
        let base = repo.base_commit.clone();
        for entry in repo
            .entries
            .iter_mut()
            .filter(|e| e.ready && e.commit != base)
        {
            entry.ready = false;
            entry.commit = base.clone();
            let (path, commit, tx) = (entry.path.clone(), base.clone(), tx.clone());
            tokio::spawn(async move {
                let at = path.clone();
                let to = commit.clone();
                let result = tokio::task::spawn_blocking(move || pool::refresh(&at, &to, workers))
                    .await
                    .map_err(Error::from)
                    .and_then(|r| r);
                let _ = tx
                    .send(Msg::PoolFilled(path, result.map(|()| commit)))
                    .await;
            });
        }
    }

    /// A fill or refresh finished.
    pub(super) async fn pool_filled(&mut self, path: PathBuf, result: Result<String, Error>) {
        let size = self.config.pool_size;
        let disk_high = self.disk_is_high();
        let closed = self.pool.closed;
        let holder = self
            .pool
            .repos
            .iter_mut()
            .find(|(_, repo)| repo.entries.iter().any(|e| e.path == path));
        let Some((_, repo)) = holder else {
            self.pool_evict(path, None);
            self.pool_check_drained();
            return;
        };
        let position = repo.entries.iter().position(|e| e.path == path);
        match (result, position) {
            (Ok(commit), Some(index)) => {
                let unwanted =
                    closed || repo.last_spawn.is_none() || repo.entries.len() > size || disk_high;
                if unwanted {
                    repo.entries.remove(index);
                    let target = repo.target.clone();
                    self.pool_evict(path, Some(target));
                } else {
                    repo.entries[index].ready = true;
                    repo.entries[index].commit = commit;
                    tracing::debug!(pool = %path.display(), "warm-pool worktree ready");
                }
            }
            (Err(e), index) => {
                tracing::warn!(pool = %path.display(), error = %e, "cannot fill a warm-pool worktree; the pool of this repository waits for the next spawn");
                repo.stalled = true;
                if let Some(index) = index {
                    repo.entries.remove(index);
                }
                let target = repo.target.clone();
                if path.exists() {
                    self.pool_evict(path, Some(target));
                }
            }
            (Ok(_), None) => {}
        }
        self.pool_check_drained();
        self.admit_queued().await;
    }

    /// Starts removing a pool worktree (salvaged first if anyone wrote into it).
    pub(super) fn pool_evict(&mut self, path: PathBuf, target: Option<RepoTarget>) {
        if !self.pool.evicting.insert(path.clone()) {
            return;
        }
        let (lanes, tx) = (self.lanes.clone(), self.tx.clone());
        tokio::spawn(async move {
            let result = async {
                let target = match target {
                    Some(target) => target,
                    None => {
                        let probe = path.clone();
                        tokio::task::spawn_blocking(move || resolve_repo(&probe)).await??
                    }
                };
                let at = path.clone();
                let (salvaged, trash) = lanes
                    .run(&target, move |lane| pool::discard(lane, &at))
                    .await?;
                // Outside the lane, but before the eviction is reported: a drain for
                // disk pressure measures again once it is done.
                if let Some(trash) = trash {
                    let _ = tokio::task::spawn_blocking(move || trash.delete()).await;
                }
                Ok(salvaged)
            }
            .await;
            let _ = tx.send(Msg::PoolEvicted(path, result)).await;
        });
    }

    pub(super) async fn pool_evicted(
        &mut self,
        path: PathBuf,
        result: Result<Option<String>, Error>,
    ) {
        self.pool.evicting.remove(&path);
        match result {
            Ok(None) => tracing::debug!(pool = %path.display(), "warm-pool worktree removed"),
            Ok(Some(salvage_ref)) => {
                tracing::warn!(pool = %path.display(), %salvage_ref, "a warm-pool worktree held changes; salvaged and removed");
                let removal = grove_proto::types::Removal {
                    at_ms: grove_proto::now_ms(),
                    path: path.clone(),
                    reason: "warm pool: removed a pool worktree someone had written into".into(),
                    agent_id: None,
                    repo: None,
                    salvage_ref: Some(salvage_ref),
                    salvage_commit: None,
                };
                let _ = self
                    .db
                    .call(move |conn| crate::db::removals::record(conn, &removal))
                    .await;
            }
            Err(e) => {
                tracing::warn!(pool = %path.display(), error = %e, "cannot remove a warm-pool worktree; left in place");
            }
        }
        self.pool_check_drained();
        self.admit_queued().await;
    }

    /// Evicts ready pool worktrees until `needed` slots are on their way (agents wait).
    pub(super) fn pool_make_room(&mut self, needed: usize) {
        let needed = needed.saturating_sub(self.pool.evicting.len());
        for _ in 0..needed {
            if !self.pool_evict_one() {
                break;
            }
        }
    }

    /// Evicts one ready pool worktree, preferring repositories no longer active.
    fn pool_evict_one(&mut self) -> bool {
        let mut candidates: Vec<(&PathBuf, &mut RepoPool)> = self
            .pool
            .repos
            .iter_mut()
            .filter(|(_, repo)| repo.entries.iter().any(|e| e.ready))
            .collect();
        candidates.sort_by_key(|(_, repo)| repo.last_spawn);
        let Some((_, repo)) = candidates.into_iter().next() else {
            return false;
        };
        let Some(index) = repo.entries.iter().position(|e| e.ready) else {
            return false;
        };
        let entry = repo.entries.remove(index);
        let target = repo.target.clone();
        self.pool_evict(entry.path, Some(target));
        true
    }

    /// Disk pressure or shutdown (`close`): every ready pool worktree goes, and so does
    /// each one being filled once its fill ends (the disk is over `disk_high`, or the
    /// pool is closed); `done` fires when nothing is under way any more.
    pub(super) fn pool_drain(&mut self, done: oneshot::Sender<()>, close: bool) {
        self.pool.closed |= close;
        while self.pool_evict_one() {}
        self.pool.drained.push(done);
        self.pool_check_drained();
    }

    fn pool_check_drained(&mut self) {
        let filling = self
            .pool
            .repos
            .values()
            .any(|repo| repo.entries.iter().any(|e| !e.ready));
        if self.pool.evicting.is_empty() && !filling {
            for waiter in self.pool.drained.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Removes pool worktrees an earlier daemon left (their fill may have been cut short).
    pub(super) fn pool_evict_leftovers(&mut self) {
        for dir in worktree_dirs(&self.config.dirs.worktree_root) {
            if pool::is_pool_dir(&dir) {
                tracing::info!(pool = %dir.display(), "removing a warm-pool worktree left by an earlier daemon");
                self.pool_evict(dir, None);
            }
        }
    }

    /// When the next repository's pool goes quiet.
    pub(super) fn pool_deadline(&self) -> Option<Instant> {
        let idle = self.config.pool_idle;
        self.pool
            .repos
            .values()
            .filter_map(|repo| repo.last_spawn)
            .map(|at| at + idle)
            .min()
    }

    /// Repositories without a spawn for `pool_idle` lose their pool.
    pub(super) fn pool_expire(&mut self) {
        let now = Instant::now();
        let idle = self.config.pool_idle;
        let mut doomed = Vec::new();
        for repo in self.pool.repos.values_mut() {
            if repo.last_spawn.is_some_and(|at| at + idle <= now) {
                repo.last_spawn = None;
                tracing::info!(repo = %repo.target.workdir.display(), "no spawn for a while: dropping the warm pool");
                let (ready, filling): (Vec<Entry>, Vec<Entry>) =
                    repo.entries.drain(..).partition(|e| e.ready);
                repo.entries = filling;
                doomed.extend(ready.into_iter().map(|e| (e.path, repo.target.clone())));
            }
        }
        for (path, target) in doomed {
            self.pool_evict(path, Some(target));
        }
        self.pool
            .repos
            .retain(|_, repo| repo.last_spawn.is_some() || !repo.entries.is_empty());
    }

    /// What the pool holds, for `daemon.status`.
    pub(super) fn pool_status(&self) -> Vec<PoolWorktree> {
        let mut out: Vec<PoolWorktree> = self
            .pool
            .repos
            .values()
            .flat_map(|repo| {
                repo.entries.iter().map(|e| PoolWorktree {
                    repo: repo.target.workdir.clone(),
                    path: e.path.clone(),
                    commit: e.commit.clone(),
                    ready: e.ready,
                })
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}

/// Where worktrees can be cloned, a pool worktree checked out gives its base a
/// template, in the background (the pool is ready meanwhile): the next fill clones.
fn make_template(common: &Path, worktree: &Path, base: git2::Oid, workers: usize) {
    if !crate::git::clone_checkout::root_clones(worktree) {
        return;
    }
    let (common, worktree) = (common.to_path_buf(), worktree.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let made = crate::git::clone_checkout::build_template(&common, &worktree, base, workers);
        if let Err(e) = made {
            tracing::warn!(error = %e, "cannot make the template for copy-on-write worktrees");
        }
    });
}

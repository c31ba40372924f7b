//! Facts about the worktree root on disk: how full it is, which of its directories are
//! worktrees, and the names of what else lives there (trash being deleted, templates).
//! Everything that reads or makes the root (git, the core, the janitor, the metrics)
//! asks here, so this module depends on no other part of the daemon.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Prefix of worktrees that are being deleted (already salvaged and unregistered).
pub const TRASH_PREFIX: &str = ".grove-trash-";

/// Templates are named for their commit; the index is the same name plus `.index`.
pub const TEMPLATE_PREFIX: &str = ".grove-template-";

/// A `grove merge`'s temporary worktree (`merge-<pid>-...`, made under a lease by the
/// user's process): no agent's slot.
pub fn is_merge_worktree(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("merge-"))
}

/// Every directory two levels below the root: `<root>/<repo-dir>/<worktree>`.
pub fn worktree_dirs(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(repos) = fs::read_dir(root) else {
        return found;
    };
    for repo in repos.flatten() {
        if !repo.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(worktrees) = fs::read_dir(repo.path()) else {
            continue;
        };
        for wt in worktrees.flatten() {
            let name = wt.file_name();
            let name = name.to_string_lossy();
            // Files being deleted, and the templates worktrees are cloned from: no
            // agent's, nobody's work.
            let deleting = name.starts_with(TRASH_PREFIX);
            let template = name.starts_with(TEMPLATE_PREFIX);
            if wt.file_type().is_ok_and(|t| t.is_dir()) && !deleting && !template {
                found.push(wt.path());
            }
        }
    }
    found.sort();
    found
}

/// How full the filesystem holding a path is, as `df` counts: blocks reserved for root
/// are neither used nor available.
#[derive(Debug, Clone)]
pub struct DiskUsage {
    /// The nearest existing ancestor of the path asked about (what statvfs measured).
    pub measured: PathBuf,
    /// Used fraction, 0..=1.
    pub used: f64,
    pub free_bytes: u64,
    pub size_bytes: u64,
}

pub fn measure(path: &Path) -> io::Result<DiskUsage> {
    let measured = existing_ancestor(path);
    let stat = nix::sys::statvfs::statvfs(&measured).map_err(io::Error::from)?;
    let block = stat.fragment_size().max(1) as u128;
    let used = (stat.blocks() as u128).saturating_sub(stat.blocks_free() as u128);
    let available = stat.blocks_available() as u128;
    let bytes = |blocks: u128| (blocks * block).min(u64::MAX as u128) as u64;
    Ok(DiskUsage {
        used: if used + available > 0 {
            used as f64 / (used + available) as f64
        } else {
            0.0
        },
        free_bytes: bytes(available),
        size_bytes: bytes(used + available),
        measured,
    })
}

/// Fraction of the filesystem holding `path` that is in use.
pub fn usage(path: &Path) -> io::Result<f64> {
    measure(path).map(|disk| disk.used)
}

/// As [`usage`], once what was removed is free: btrfs frees blocks at its next commit,
/// and a count taken before would make disk pressure remove more than it must.
pub fn usage_synced(path: &Path) -> io::Result<f64> {
    let dir = fs::File::open(existing_ancestor(path))?;
    grove_sys::fs::sync_filesystem(&dir)?;
    usage(path)
}

fn existing_ancestor(path: &Path) -> PathBuf {
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            return PathBuf::from("/");
        }
    }
    probe
}

/// When a worktree was last touched: the newest mtime of the directory itself and of its
/// git bookkeeping (index, HEAD log), which move whenever anyone works in it.
pub fn last_activity(worktree: &Path) -> SystemTime {
    let mut newest = mtime(worktree).unwrap_or(SystemTime::UNIX_EPOCH);
    if let Some(admin) = admin_dir(worktree) {
        for file in ["index", "HEAD", "logs/HEAD"] {
            if let Some(t) = mtime(&admin.join(file)) {
                newest = newest.max(t);
            }
        }
    }
    newest
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The worktree's admin dir, from its `.git` file (`gitdir: <path>`).
pub fn admin_dir(worktree: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string(worktree.join(".git")).ok()?;
    let dir = text.strip_prefix("gitdir:")?.trim();
    Some(worktree.join(dir))
}

/// Worktrees whose deletion a crash or a stop interrupted (renamed to `.grove-trash-*`
/// after salvage): nothing in them is needed any more.
pub fn find_trash(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for repo in fs::read_dir(root).into_iter().flatten().flatten() {
        for entry in fs::read_dir(repo.path()).into_iter().flatten().flatten() {
            let trash = entry
                .file_name()
                .to_string_lossy()
                .starts_with(TRASH_PREFIX);
            if trash {
                found.push(entry.path());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn usage_is_a_fraction() {
        let used = super::usage(std::path::Path::new("/tmp/does/not/exist")).expect("statvfs");
        assert!((0.0..=1.0).contains(&used));
    }
}

//! Copy-on-write checkouts. Where the worktree root's filesystem clones files (reflink:
//! btrfs, XFS), grove keeps one checkout of a repository's latest base beside its
//! worktrees, a template (`.grove-template-<commit>`, its index beside it), and makes an
//! agent's checkout of that base by cloning the template's files and index: the clones
//! share the template's blocks until written, so N worktrees cost about one checkout of
//! disk, and no file is written out again. Elsewhere, and for a base with no template
//! yet, worktrees are checked out as before; the first such checkout on a reflink root
//! has its base's template made beside it.

use super::hardened_git;
use crate::error::Error;
use git2::{IndexTime, Oid};
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::worktree_root::TEMPLATE_PREFIX;

/// A gitlink (a submodule's commit): no file of its own to clone or to stat.
const GITLINK: u32 = 0o160000;

/// The template of `base` among the worktrees of `repo_dir`.
pub fn template(repo_dir: &Path, base: Oid) -> PathBuf {
    repo_dir.join(format!("{TEMPLATE_PREFIX}{base}"))
}

fn index_of(template: &Path) -> PathBuf {
    let mut name = template.as_os_str().to_owned();
    name.push(".index");
    PathBuf::from(name)
}

/// True for a template or its index (the janitor's scans pass over them).
pub fn is_template(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(TEMPLATE_PREFIX))
}

/// How a worktree at `path` of `base` can be made: the template to clone, when there is
/// one. A template is only made where the filesystem clones, so it is not probed again
/// here; a clone that fails all the same (the root moved to another filesystem) falls
/// back to a checkout in the callers.
pub fn usable_template(path: &Path, base: Oid) -> Option<PathBuf> {
    let repo_dir = path.parent()?;
    let template = template(repo_dir, base);
    (template.is_dir() && index_of(&template).is_file()).then_some(template)
}

/// Whether worktrees beside `path` could be cloned (the filesystem clones files).
pub fn root_clones(path: &Path) -> bool {
    path.parent().is_some_and(grove_sys::reflink::supported)
}

/// Clones the template's files into `dest` (an empty directory, or one holding only
/// `.git`) and its index to `dest_index`, with the stat data of the new files, so that
/// the checkout is clean at once and git hashes nothing to see so.
pub fn clone_into(template: &Path, dest: &Path, dest_index: &Path) -> Result<(), Error> {
    if grove_sys::subvolume::is_subvolume(template) && dest.join(".git").is_file() {
        snapshot_into(template, dest)?;
    } else {
        clone_dir(template, dest)?;
    }
    fs::copy(index_of(template), dest_index)
        .map_err(|e| Error::Git(format!("cannot copy the template's index: {e}")))?;
    restat(dest, dest_index)?;
    touch(template);
    Ok(())
}

/// Marks the template used now (its index's mtime): the janitor removes one unused for
/// `pool_idle`. Best effort: a template removed meanwhile has nothing to mark.
fn touch(template: &Path) {
    let marked = File::options()
        .write(true)
        .open(index_of(template))
        .and_then(|index| index.set_modified(SystemTime::now()));
    if let Err(e) = marked {
        tracing::debug!(template = %template.display(), error = %e, "cannot mark a template used");
    }
}

/// The templates under the worktree root, each with when it was last used (made or
/// cloned).
pub fn templates(root: &Path) -> Vec<(PathBuf, SystemTime)> {
    let mut found = Vec::new();
    for repo in fs::read_dir(root).into_iter().flatten().flatten() {
        for entry in fs::read_dir(repo.path()).into_iter().flatten().flatten() {
            let path = entry.path();
            if !is_template(&path) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let used = fs::metadata(index_of(&path))
                .or_else(|_| entry.metadata())
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((path, used));
        }
    }
    found
}

/// Removes a template, which holds no one's work: its index first, so that no spawn
/// starts cloning it (one cloning it meanwhile fails and checks out instead), then its
/// files under a trash name, which the start-up scan deletes should a crash cut this
/// short.
pub fn remove_template(template: &Path) -> std::io::Result<()> {
    match fs::remove_file(index_of(template)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let trash = super::worktree::trash_path(template);
    fs::rename(template, &trash)?;
    fs::remove_dir_all(&trash)
}

/// Makes `dest`, a linked worktree holding only its `.git` file, a snapshot of the
/// template (a btrfs subvolume) with that `.git` file in it: one ioctl, whatever the
/// number of files, and the snapshot shares the template's metadata as well as its data.
/// On failure `dest` is as it was.
fn snapshot_into(template: &Path, dest: &Path) -> Result<(), Error> {
    let failed = |what: &str, e: std::io::Error| {
        Error::Git(format!("cannot {what} {}: {e}", dest.display()))
    };
    let only_git = fs::read_dir(dest).map_err(|e| failed("read", e))?.count() == 1;
    if !only_git {
        return Err(Error::Git(format!(
            "{} holds more than its .git file",
            dest.display()
        )));
    }
    let git_file = dest.join(".git");
    let link = fs::read(&git_file).map_err(|e| failed("read the .git file of", e))?;
    fs::remove_file(&git_file).map_err(|e| failed("empty", e))?;
    fs::remove_dir(dest).map_err(|e| failed("remove", e))?;
    let snapped = grove_sys::subvolume::snapshot(template, dest);
    if snapped.is_err() {
        let _ = fs::create_dir(dest);
    }
    fs::write(&git_file, link).map_err(|e| failed("write the .git file of", e))?;
    snapped.map_err(|e| failed("snapshot the template into", e))
}

fn clone_dir(from: &Path, to: &Path) -> Result<(), Error> {
    let failed = |what: &str, at: &Path, e: std::io::Error| {
        Error::Git(format!("cannot {what} {}: {e}", at.display()))
    };
    for entry in fs::read_dir(from).map_err(|e| failed("read", from, e))? {
        let entry = entry.map_err(|e| failed("read", from, e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let meta = entry.metadata().map_err(|e| failed("stat", &source, e))?;
        if meta.is_dir() {
            fs::create_dir(&target).map_err(|e| failed("create", &target, e))?;
            clone_dir(&source, &target)?;
            fs::set_permissions(&target, meta.permissions())
                .map_err(|e| failed("set the mode of", &target, e))?;
        } else if meta.file_type().is_symlink() {
            let link = fs::read_link(&source).map_err(|e| failed("read", &source, e))?;
            std::os::unix::fs::symlink(link, &target).map_err(|e| failed("link", &target, e))?;
        } else if meta.is_file() {
            clone_file(&source, &target, &meta).map_err(|e| failed("clone", &target, e))?;
        }
    }
    Ok(())
}

fn clone_file(source: &Path, target: &Path, meta: &fs::Metadata) -> std::io::Result<()> {
    let src = File::open(source)?;
    let dst = File::options().write(true).create_new(true).open(target)?;
    grove_sys::reflink::clone_file(&src, &dst)?;
    dst.set_permissions(meta.permissions())?;
    // git compares mtimes: the clone keeps the template's, as a copy with -p would.
    dst.set_modified(meta.modified()?)
}

/// Rewrites the stat data of every entry of the index at `index` from the files under
/// `root`; the contents are the template's, so the object ids stay.
fn restat(root: &Path, index: &Path) -> Result<(), Error> {
    let failed = |e: git2::Error| {
        Error::Git(format!(
            "cannot rewrite {}: {}",
            index.display(),
            e.message()
        ))
    };
    let mut entries = git2::Index::open(index).map_err(failed)?;
    let all: Vec<git2::IndexEntry> = entries.iter().collect();
    for mut entry in all {
        if entry.mode == GITLINK {
            continue;
        }
        let path = root.join(std::ffi::OsStr::from_bytes(&entry.path));
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        // The index keeps 32 bits of each: what git itself writes.
        entry.ctime = IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
        entry.mtime = IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
        entry.dev = meta.dev() as u32;
        entry.ino = meta.ino() as u32;
        entry.uid = meta.uid();
        entry.gid = meta.gid();
        entry.file_size = meta.len() as u32;
        entries.add(&entry).map_err(failed)?;
    }
    entries.write().map_err(failed)
}

/// Makes the template of `base` beside `worktree` (a checkout of the same base, just
/// made or, on btrfs, about to be snapshotted from it), unless there is one, and removes
/// the repository's older templates: one per repository. Built under a trash name, so
/// that a crash leaves only what the start-up scan deletes; it writes only its own
/// files, so it may run outside the lane.
pub fn build_template(
    common_dir: &Path,
    worktree: &Path,
    base: Oid,
    workers: usize,
) -> Result<(), Error> {
    let Some(repo_dir) = worktree.parent() else {
        return Ok(());
    };
    let done = template(repo_dir, base);
    if done.exists() {
        return Ok(());
    }
    // A name of its own: a spawn's checkout and a pool's may build the same base at once.
    let building = super::worktree::trash_path(&repo_dir.join(format!("template-{base}")));
    // Inside what is built until placed: a crash leaves one trash directory, no file.
    let building_index = building.join(".grove-template-index");
    // On btrfs a subvolume, which linked worktrees are then snapshotted from whole.
    let subvolume =
        grove_sys::subvolume::on_btrfs(repo_dir) && grove_sys::subvolume::create(&building).is_ok();
    if !subvolume {
        fs::create_dir_all(&building)
            .map_err(|e| Error::Git(format!("cannot create {}: {e}", building.display())))?;
    }
    // Hardened as any checkout of a base: it may be an agent's commit.
    let made = super::output_on_index(
        {
            let mut git = hardened_git();
            git.arg("--git-dir")
                .arg(common_dir)
                .arg("--work-tree")
                .arg(&building)
                .arg("-c")
                .arg(format!("checkout.workers={workers}"));
            git
        },
        Some(&building_index),
        &building,
        &["read-tree", "--reset", "-u", &base.to_string()],
    );
    if done.exists() {
        // The other build placed the same template first.
        let _ = fs::remove_dir_all(&building);
        return Ok(());
    }
    let placed = made.and_then(|_| {
        move_out(&building_index, &index_of(&done))
            .and_then(|()| fs::rename(&building, &done))
            .map_err(|e| Error::Git(format!("cannot place {}: {e}", done.display())))
    });
    if placed.is_err() {
        let _ = fs::remove_dir_all(&building);
        return placed;
    }
    remove_older(repo_dir, &done);
    Ok(())
}

/// Renames `from` to `to`, or copies it where they are in different subvolumes.
fn move_out(from: &Path, to: &Path) -> std::io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EXDEV as i32) => {
            fs::copy(from, to)?;
            fs::remove_file(from)
        }
        done => done,
    }
}

/// The repository's other templates go: they hold no work, only a base it moved from.
fn remove_older(repo_dir: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(repo_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !is_template(&path) || path == keep || path == index_of(keep) {
            continue;
        }
        let removed = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an old template");
        }
    }
}

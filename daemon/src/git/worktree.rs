//! Creating and removing agent worktrees.

use super::lane::RepoLane;
use crate::error::Error;
use git2::{ErrorCode, Oid, Repository, WorktreePruneOptions};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the base was given as, and the commit it names.
pub struct Base {
    pub name: String,
    pub commit: Oid,
}

/// Resolves `--base`, or when none is given the HEAD of the worktree the caller stands
/// in (`caller_git_dir`).
pub fn resolve_base(
    lane: &RepoLane,
    base: Option<&str>,
    caller_git_dir: &Path,
) -> Result<Base, Error> {
    let repo = &lane.repo;
    let workdir = lane.target.workdir.display();
    match base {
        Some(name) => {
            let commit = repo
                .revparse_single(name)
                .and_then(|object| object.peel_to_commit())
                .map_err(|_| {
                    Error::BadInput(format!(
                        "base `{name}` is not a branch, tag or commit of {workdir}; \
                         check `git -C '{workdir}' branch -a`"
                    ))
                })?;
            Ok(Base {
                name: name.to_string(),
                commit: commit.id(),
            })
        }
        None => {
            let caller = Repository::open(caller_git_dir).map_err(|e| {
                Error::Git(format!(
                    "cannot open {}: {}",
                    caller_git_dir.display(),
                    e.message()
                ))
            })?;
            let head = caller.head().map_err(|e| match e.code() {
                ErrorCode::UnbornBranch | ErrorCode::NotFound => Error::BadInput(format!(
                    "{workdir} has no commits yet (its HEAD is unborn); \
                     make a first commit, or pass --base"
                )),
                _ => Error::Git(format!("cannot read HEAD of {workdir}: {}", e.message())),
            })?;
            let commit = head.peel_to_commit().map_err(|e| {
                Error::Git(format!(
                    "HEAD of {workdir} is not a commit: {}",
                    e.message()
                ))
            })?;
            let name = match head.shorthand() {
                Some(short) if head.is_branch() => short.to_string(),
                _ => commit.id().to_string(),
            };
            Ok(Base {
                name,
                commit: commit.id(),
            })
        }
    }
}

/// How a worktree's files came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkout {
    /// Cloned from the template of its base (`clone_checkout`): copy-on-write.
    Cloned,
    /// Written out by git.
    CheckedOut,
}

/// Creates `branch` at `base` and checks it out at `path`, locked with `reason`: cloned
/// from the template of `base` where the filesystem allows, else checked out by git.
/// On failure nothing is left behind: no directory, no metadata, no branch.
pub fn create(
    lane: &RepoLane,
    path: &Path,
    branch: &str,
    base: Oid,
    reason: &str,
    checkout_workers: usize,
    sparse: &[String],
) -> Result<Checkout, Error> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| Error::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    if sparse.is_empty() {
        let template = super::clone_checkout::usable_template(path, base)
            .or_else(|| template_first(lane, path, base, checkout_workers));
        if let Some(template) = template {
            match create_cloned(lane, path, branch, reason, &template) {
                Ok(()) => return Ok(Checkout::Cloned),
                // A template removed meanwhile (its base moved on): check out instead.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot clone the template; checking out");
                    rollback(&lane.repo, path, branch);
                }
            }
        }
    }
    check_out(lane, path, branch, base, reason, checkout_workers, sparse)?;
    Ok(Checkout::CheckedOut)
}

/// On btrfs a base's first checkout is made as its template (a subvolume), and this
/// worktree, like every later one, a snapshot of it: all of them share that one
/// checkout's blocks and metadata, where a checkout with a template beside it cost two.
/// Elsewhere (a per-file clone costs an inode a file whatever it shares) the template
/// is made from a first checkout, in the background (`core::prepare`).
fn template_first(lane: &RepoLane, path: &Path, base: Oid, workers: usize) -> Option<PathBuf> {
    let repo_dir = path.parent()?;
    if !grove_sys::subvolume::on_btrfs(repo_dir) {
        return None;
    }
    let common = lane.repo.commondir().to_path_buf();
    if let Err(e) = super::clone_checkout::build_template(&common, path, base, workers) {
        tracing::warn!(path = %path.display(), error = %e, "cannot make the template first; checking out");
        return None;
    }
    super::clone_checkout::usable_template(path, base)
}

/// The worktree registered without a checkout, then its files and index cloned from
/// `template`.
fn create_cloned(
    lane: &RepoLane,
    path: &Path,
    branch: &str,
    reason: &str,
    template: &Path,
) -> Result<(), Error> {
    forget_metadata(&lane.repo, path);
    let base = lane
        .repo
        .find_commit(template_commit(template)?)
        .map_err(|e| Error::Git(format!("template commit: {}", e.message())))?;
    create_branch(&lane.repo, branch, base.id())?;
    let output = super::hardened_git()
        .arg("-C")
        .arg(&lane.target.workdir)
        .args([
            "worktree",
            "add",
            "--quiet",
            "--no-checkout",
            "--lock",
            "--reason",
            reason,
        ])
        .arg(path)
        .arg(branch)
        .output()
        .map_err(|e| Error::Git(format!("cannot run git: {e}")))?;
    if !output.status.success() {
        return Err(Error::Git(format!(
            "git worktree add --no-checkout {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let admin = crate::worktree_root::admin_dir(path)
        .ok_or_else(|| Error::Git(format!("{} has no git admin dir", path.display())))?;
    super::clone_checkout::clone_into(template, path, &admin.join("index"))?;
    crate::faults::point("after_worktree_add");
    Ok(())
}

/// The commit a template is of (its name says).
fn template_commit(template: &Path) -> Result<Oid, Error> {
    let name = template
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let hex = name
        .strip_prefix(super::clone_checkout::TEMPLATE_PREFIX)
        .unwrap_or_default();
    Oid::from_str(hex).map_err(|e| Error::Git(format!("template {name}: {}", e.message())))
}

/// `git worktree add` with its checkout (or a sparse one).
fn check_out(
    lane: &RepoLane,
    path: &Path,
    branch: &str,
    base: Oid,
    reason: &str,
    checkout_workers: usize,
    sparse: &[String],
) -> Result<(), Error> {
    // An earlier attempt at this path that a crash cut short may have left metadata
    // that git refuses to add over ("a missing but locked worktree").
    forget_metadata(&lane.repo, path);
    // The branch through git2 (bookkeeping), the checkout through the CLI: it checks out
    // in parallel and locks the new worktree in the same step. Hardened: the base may be
    // an agent's commit, so no hook, fsmonitor or global filter runs on it.
    create_branch(&lane.repo, branch, base)?;
    let output = super::hardened_git()
        .arg("-C")
        .arg(&lane.target.workdir)
        .arg("-c")
        .arg(format!("checkout.workers={checkout_workers}"))
        .args(["worktree", "add", "--quiet", "--lock", "--reason", reason])
        .args(if sparse.is_empty() {
            &[][..]
        } else {
            &["--no-checkout"][..]
        })
        .arg(path)
        .arg(branch)
        .output()
        .map_err(|e| Error::Git(format!("cannot run git: {e}")));
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            rollback(&lane.repo, path, branch);
            return Err(e);
        }
    };
    if output.status.success() {
        if let Err(e) = check_out_sparse(path, sparse, checkout_workers) {
            rollback(&lane.repo, path, branch);
            return Err(e);
        }
        crate::faults::point("after_worktree_add");
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    rollback(&lane.repo, path, branch);
    Err(Error::Git(format!(
        "git worktree add {} failed: {stderr}",
        path.display()
    )))
}

/// Creates the agent's `branch` at `base`.
pub fn create_branch(repo: &Repository, branch: &str, base: Oid) -> Result<(), Error> {
    // A lock left by an interrupted earlier attempt at this very branch is stale: the
    // branch name holds a fresh agent id and only this lane writes it now.
    clear_stale_ref_lock(repo, branch);
    let commit = repo
        .find_commit(base)
        .map_err(|e| Error::Git(format!("base commit {base}: {}", e.message())))?;
    repo.branch(branch, &commit, false)
        .map_err(|e| Error::Git(format!("cannot create branch {branch}: {}", e.message())))?;
    crate::faults::point("after_branch_create");
    Ok(())
}

/// For `--sparse`: cone-mode sparse checkout of `dirs` in the new worktree, then the
/// checkout itself (the worktree was added with `--no-checkout`).
fn check_out_sparse(path: &Path, dirs: &[String], checkout_workers: usize) -> Result<(), Error> {
    if dirs.is_empty() {
        return Ok(());
    }
    let run = |args: &[&str]| super::run_checkout(path, checkout_workers, args);
    let mut set = vec!["sparse-checkout", "set", "--cone", "--"];
    set.extend(dirs.iter().map(String::as_str));
    run(&set)?;
    // One-way merge into the empty index: every entry, the ones outside the cone
    // marked skip-worktree, only the cone on disk.
    run(&["read-tree", "-mu", "HEAD"])
}

/// Undoes a partial creation: worktree directory, its metadata and the branch.
pub fn rollback(repo: &Repository, path: &Path, branch: &str) {
    if let Err(e) = remove(repo, path) {
        tracing::warn!(path = %path.display(), error = %e, "rollback: removing worktree");
    }
    if let Ok(mut b) = repo.find_branch(branch, git2::BranchType::Local) {
        if let Err(e) = b.delete() {
            tracing::warn!(branch, error = %e, "rollback: deleting branch");
        }
    }
}

/// The name git gave the worktree at `path` (its directory under `.git/worktrees`).
fn worktree_name(repo: &Repository, path: &Path) -> Option<String> {
    let wanted = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let names = repo.worktrees().ok()?;
    names.iter().flatten().find_map(|name| {
        let wt = repo.find_worktree(name).ok()?;
        let at = wt
            .path()
            .canonicalize()
            .unwrap_or_else(|_| wt.path().to_path_buf());
        (at == wanted || wt.path() == path).then(|| name.to_string())
    })
}

/// Removes `refs/heads/<branch>.lock` when no one can be writing the branch any more.
pub fn clear_stale_ref_lock(repo: &Repository, branch: &str) {
    let lock = repo
        .commondir()
        .join("refs/heads")
        .join(format!("{branch}.lock"));
    if fs::remove_file(&lock).is_ok() {
        tracing::warn!(lock = %lock.display(), "removed a stale branch lock");
    }
}

/// The git worktree whose directory is `path`.
pub fn find(repo: &Repository, path: &Path) -> Option<git2::Worktree> {
    worktree_name(repo, path).and_then(|name| repo.find_worktree(&name).ok())
}

/// Unlocks and deletes the worktree at `path` and prunes its metadata. The caller has
/// salvaged it first. A missing directory or missing metadata is not an error.
pub fn remove(repo: &Repository, path: &Path) -> Result<(), Error> {
    if let Some(trash) = take_out(repo, path)? {
        trash.delete();
    }
    Ok(())
}

/// A removed worktree's files: out of its path and no longer a worktree of the
/// repository, still to be deleted (a crash before that leaves them to the start-up
/// scan, see `worktree_root::find_trash`).
#[derive(Debug)]
#[must_use = "the files stay on disk until `delete`"]
pub struct Trash(std::path::PathBuf);

impl Trash {
    /// A removed worktree's files found set aside by an earlier daemon.
    pub fn found(path: std::path::PathBuf) -> Trash {
        Trash(path)
    }

    pub fn delete(self) {
        delete_trash(&self.0);
    }
}

/// `remove` but the deletion of the files, which the caller does when it suits it:
/// a big worktree takes tens of milliseconds to delete, and nothing needs that done
/// before its collect is reported. `None` when there was no directory.
pub fn take_out(repo: &Repository, path: &Path) -> Result<Option<Trash>, Error> {
    let name = worktree_name(repo, path);
    if let Some(wt) = name.as_deref().and_then(|n| repo.find_worktree(n).ok()) {
        let _ = wt.unlock();
    }
    // Out of the way in one atomic rename first, deleted after: a crash in the middle
    // of deleting must never leave a half-emptied worktree that a later salvage would
    // record as the agent deleting its files.
    let trash = trash_path(path);
    let moved = match fs::rename(path, &trash) {
        Ok(()) => Some(Trash(trash)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(Error::Git(format!(
                "cannot remove worktree {}: {e}",
                path.display()
            )))
        }
    };
    if let Some(wt) = name.as_deref().and_then(|n| repo.find_worktree(n).ok()) {
        wt.prune(Some(
            WorktreePruneOptions::new()
                .valid(true)
                .locked(true)
                .working_tree(true),
        ))
        .map_err(|e| {
            Error::Git(format!(
                "cannot prune worktree metadata of {}: {}",
                path.display(),
                e.message()
            ))
        })?;
    }
    forget_metadata(repo, path);
    Ok(moved)
}

/// Drops whatever `.git/worktrees/` still holds for `path`, complete or not: a git
/// killed while adding the worktree leaves an entry git2 cannot open (so it is not
/// pruned above) and that `git worktree add` refuses to add over. Runs in the lane,
/// so no add of `path` is under way.
fn forget_metadata(repo: &Repository, path: &Path) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let real = path
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .map(|p| p.join(&name).join(".git"));
    let wanted = [Some(path.join(".git")), real];
    let entries = fs::read_dir(repo.commondir().join("worktrees"));
    for entry in entries.into_iter().flatten().flatten() {
        let gitdir = fs::read_to_string(entry.path().join("gitdir")).ok();
        let ours = match gitdir.as_deref().map(str::trim) {
            Some(gitdir) => wanted.iter().flatten().any(|w| w == Path::new(gitdir)),
            // Made before git wrote where it points: named after the path (plus a
            // number when the name was taken).
            None => entry
                .file_name()
                .to_string_lossy()
                .strip_prefix(&name)
                .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit())),
        };
        if ours {
            match fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "dropped worktree metadata a crash left")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot drop stale worktree metadata")
                }
            }
        }
    }
}

/// Deletes a removed worktree. A `git checkout--worker` of a crashed daemon's checkout
/// (the parent-death signal is its parent git's, not its own) may go on writing for a
/// moment after its git died, and what it adds makes the deletion fail ("directory not
/// empty"): a few tries over half a second outlast it.
fn delete_trash(trash: &Path) {
    const TRIES: u32 = 20;
    for attempt in 1..=TRIES {
        match fs::remove_dir_all(trash) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) if attempt < TRIES => std::thread::sleep(std::time::Duration::from_millis(25)),
            Err(e) => {
                // Already salvaged and unregistered: the start-up scan deletes it later.
                tracing::warn!(path = %trash.display(), error = %e, "cannot delete a removed worktree yet");
            }
        }
    }
}

pub use crate::worktree_root::TRASH_PREFIX;

/// A trash name of its own for each removal: a stale trash directory of an earlier
/// removal of the same path (its deletion interrupted) must never make this one fail.
pub(crate) fn trash_path(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = crate::ids::random_hex(4).unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{:x}{nanos:x}", std::process::id())
    });
    path.with_file_name(format!("{TRASH_PREFIX}{name}-{unique}"))
}

/// Start-up tidying of one repository's worktree metadata, limited to worktrees under
/// `root`: metadata whose directory is gone is pruned (unlocking it first: its agent is
/// gone too), and locks on worktrees of `finished` agents are lifted. It runs while the
/// daemon serves: a worktree no record named when the scan began (a spawn since, a
/// warm-pool worktree) keeps its lock.
pub fn tidy_metadata(
    repo: &Repository,
    root: &Path,
    live: &std::collections::HashSet<std::path::PathBuf>,
    finished: &std::collections::HashSet<std::path::PathBuf>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(names) = repo.worktrees() else {
        return notes;
    };
    for name in names.iter().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        let path = wt.path().to_path_buf();
        if !path.starts_with(root) || live.contains(&path) {
            continue;
        }
        let locked = matches!(wt.is_locked(), Ok(git2::WorktreeLockStatus::Locked(_)));
        if !path.exists() {
            let _ = wt.unlock();
            let pruned = wt.prune(Some(WorktreePruneOptions::new().valid(true).locked(true)));
            notes.push(match pruned {
                Ok(()) => format!("pruned metadata of vanished worktree {}", path.display()),
                Err(e) => format!(
                    "cannot prune metadata of {}: {}",
                    path.display(),
                    e.message()
                ),
            });
        } else if locked && finished.contains(&path) {
            let _ = wt.unlock();
            notes.push(format!(
                "unlocked {} (its agent no longer runs)",
                path.display()
            ));
        }
    }
    notes
}

//! The jailed layout: a jailed agent works in a repository of its own, made by grove,
//! that borrows the user's objects read-only (alternates). Its jail then grants that
//! repository and nothing of the user's: the agent writes its own refs, reflogs,
//! objects and index, and the user's refs, objects and logs stay out of its reach.
//! Its branch comes back into the user's repository at collect (see `collect`).

use super::clone_checkout;
use super::hardened_git;
use super::lane::RepoLane;
use super::pool::{self, Taken};
use super::scratch::{fetch_into, Scratch};
use super::worktree::create_branch;
use super::worktree::Checkout;
use crate::error::Error;
use git2::{Oid, Repository};
use std::fs;
use std::path::{Path, PathBuf};

/// Makes the agent's repository at `path` with `branch` at `base` checked out, and
/// `branch` at `base` in the user's repository (where the user sees it from the start).
/// On failure nothing is left behind.
pub fn create(
    lane: &RepoLane,
    path: &Path,
    branch: &str,
    base: Oid,
    checkout_workers: usize,
    sparse: &[String],
) -> Result<Checkout, Error> {
    if !sparse.is_empty() {
        return Err(sparse_refusal());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| Error::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    create_branch(&lane.repo, branch, base)?;
    let made = init(
        &lane.target.common_dir,
        path,
        branch,
        base,
        checkout_workers,
    );
    if made.is_err() {
        super::worktree::rollback(&lane.repo, path, branch);
    }
    made
}

/// Why `--jail --sparse` is refused.
pub fn sparse_refusal() -> Error {
    Error::BadInput(
        "--sparse cannot be combined with --jail yet: a jailed agent gets a repository of \
         its own, checked out in full; drop --sparse or --jail"
            .into(),
    )
}

fn init(
    common: &Path,
    path: &Path,
    branch: &str,
    base: Oid,
    checkout_workers: usize,
) -> Result<Checkout, Error> {
    fs::create_dir(path)
        .map_err(|e| Error::Git(format!("cannot create {}: {e}", path.display())))?;
    init_git_dir(common, path, branch, base)?;
    // The clones share no writable data with the template or anyone's checkout: a
    // write to a cloned file gives it blocks of its own (copy-on-write).
    if let Some(template) = clone_checkout::usable_template(path, base) {
        match clone_checkout::clone_into(&template, path, &path.join(".git/index")) {
            Ok(()) => return Ok(Checkout::Cloned),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot clone the template; checking out");
                clear_but_git(path)?;
            }
        }
    }
    agent_git(path)(&[
        "-c",
        &format!("checkout.workers={checkout_workers}"),
        "reset",
        "--hard",
        "--quiet",
    ])?;
    Ok(Checkout::CheckedOut)
}

/// Empties `path` but for its `.git`: a clone cut short leaves nothing git would see.
pub(super) fn clear_but_git(path: &Path) -> Result<(), Error> {
    let failed = |e: std::io::Error| Error::Git(format!("cannot empty {}: {e}", path.display()));
    for entry in fs::read_dir(path).map_err(failed)?.flatten() {
        if entry.file_name() == ".git" {
            continue;
        }
        let at = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&at).map_err(failed)?;
        } else {
            fs::remove_file(&at).map_err(failed)?;
        }
    }
    let _ = fs::remove_file(path.join(".git/index"));
    Ok(())
}

/// Runs hardened git in the agent's repository at `path`.
fn agent_git(path: &Path) -> impl Fn(&[&str]) -> Result<(), Error> + '_ {
    move |args: &[&str]| {
        let mut command = hardened_git();
        command.arg("-C").arg(path).args(args);
        run(&mut command, args.first().copied().unwrap_or("git"))
    }
}

/// The agent's `.git` in `path`: `branch` at `base`, checked out, borrowing the user's
/// objects. Its index and files are the caller's to make. In process (libgit2): two git
/// processes fewer on every jailed spawn, and nothing of the user's git setup applies.
fn init_git_dir(common: &Path, path: &Path, branch: &str, base: Oid) -> Result<(), Error> {
    let failed = |what: &str, e: git2::Error| {
        Error::Git(format!(
            "cannot {what} in {}: {}",
            path.display(),
            e.message()
        ))
    };
    // No templates: no sample hooks, no description, nothing grove did not choose.
    let mut options = git2::RepositoryInitOptions::new();
    options
        .no_reinit(true)
        .external_template(false)
        .initial_head(branch);
    Repository::init_opts(path, &options).map_err(|e| failed("make a repository", e))?;
    let info = path.join(".git/objects/info");
    fs::create_dir_all(&info)
        .map_err(|e| Error::Git(format!("cannot create {}: {e}", info.display())))?;
    let mut alternates = common.join("objects").into_os_string();
    alternates.push("\n");
    fs::write(info.join("alternates"), alternates.as_encoded_bytes())
        .map_err(|e| Error::Git(format!("cannot write alternates: {e}")))?;
    // Opened again: the objects it borrows are read when a repository is opened.
    let repo = Repository::open(path).map_err(|e| failed("open the repository", e))?;
    repo.reference(
        &format!("refs/heads/{branch}"),
        base,
        false,
        "grove: agent branch",
    )
    .map_err(|e| failed("create its branch", e))?;
    Ok(())
}

/// Turns the warm-pool worktree `taken` (a checkout of the user's content, made by
/// grove) into a jailed agent's repository at `path`: the files and their index stay,
/// the link to the user's repository goes and a `.git` of the agent's own takes its
/// place, so a jailed spawn costs a pooled spawn plus a `git init`, not a checkout. In
/// the lane. On failure the pool worktree is gone (it held no work) and no branch
/// remains.
pub fn adopt_pooled(
    lane: &RepoLane,
    taken: &Taken,
    path: &Path,
    branch: &str,
    base: Oid,
    workers: usize,
) -> Result<(), Error> {
    let result = convert_pooled(lane, taken, path, branch, base, workers);
    if result.is_err() {
        super::worktree::rollback(&lane.repo, path, branch);
        if taken.path.exists() {
            let _ = pool::discard(lane, &taken.path);
        }
    }
    result
}

fn convert_pooled(
    lane: &RepoLane,
    taken: &Taken,
    path: &Path,
    branch: &str,
    base: Oid,
    workers: usize,
) -> Result<(), Error> {
    if taken.commit != base.to_string() {
        pool::refresh(&taken.path, &base.to_string(), workers)?;
    }
    let admin = super::worktree::find(&lane.repo, &taken.path)
        .and_then(|wt| {
            wt.name()
                .map(|name| lane.repo.commondir().join("worktrees").join(name))
        })
        .ok_or_else(|| {
            Error::Git(format!(
                "pool worktree {} is not registered with git",
                taken.path.display()
            ))
        })?;
    let io = |what: &str, at: &Path| {
        let at = at.display().to_string();
        let what = what.to_string();
        move |e: std::io::Error| Error::Git(format!("cannot {what} {at}: {e}"))
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    create_branch(&lane.repo, branch, base)?;
    fs::rename(&taken.path, path).map_err(io("move the pool worktree to", path))?;
    crate::faults::point("mid_pool_adopt");
    // Read before its worktree is unregistered: the checkout it describes moved with
    // the files, untouched, so it stays exact (and the first `git status` fast).
    let index = fs::read(admin.join("index")).map_err(io("read", &admin.join("index")))?;
    fs::remove_dir_all(&admin).map_err(io("unregister", &admin))?;
    let link = path.join(".git");
    fs::remove_file(&link).map_err(io("remove", &link))?;
    init_git_dir(&lane.target.common_dir, path, branch, base)?;
    let own_index = path.join(".git/index");
    fs::write(&own_index, index).map_err(io("write", &own_index))?;
    crate::faults::point("after_worktree_add");
    Ok(())
}

fn run(command: &mut std::process::Command, what: &str) -> Result<(), Error> {
    let output = command
        .output()
        .map_err(|e| Error::Git(format!("cannot run git {what}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Git(format!(
            "git {what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// True when `path` is an agent repository of the jailed layout (its `.git` a
/// directory), not a linked worktree of the user's repository.
pub fn is_own_repo(path: &Path) -> bool {
    fs::symlink_metadata(path.join(".git")).is_ok_and(|m| m.is_dir())
}

/// The agent repository's git dir, if it is still a real directory where grove made it.
pub fn git_dir(path: &Path) -> Result<PathBuf, String> {
    let dot_git = path.join(".git");
    match fs::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => Ok(dot_git),
        Ok(_) => Err(format!(
            "{} is no longer the directory grove made (the agent replaced it)",
            dot_git.display()
        )),
        Err(e) => Err(format!("{}: {e}", dot_git.display())),
    }
}

/// The commits the agent left: its branch's tip and its HEAD, read with libgit2 (which
/// runs no hook, filter or helper). Either may be missing.
pub fn read_tips(git_dir: &Path, branch: &str) -> (Option<Oid>, Option<Oid>) {
    let Ok(repo) = Repository::open_bare(git_dir) else {
        return (None, None);
    };
    let tip = repo
        .find_reference(&format!("refs/heads/{branch}"))
        .ok()
        .and_then(|r| r.target());
    let head = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|r| r.resolve().ok())
        .and_then(|r| r.target());
    (tip, head)
}

/// Brings the HEAD commit of a jailed agent's repository (at `agent_path`) into the
/// user's repository, so that a child can start from it, unless it would bring an
/// object over `max_file` (the rule its branch is collected by). Returns the commit and
/// what it was (the branch name, or the commit). `scratch_dir` is a grove-owned
/// directory.
pub fn import_head(
    lane: &RepoLane,
    agent_path: &Path,
    scratch_dir: &Path,
    max_file: u64,
) -> Result<(String, Oid), Error> {
    let git_dir = git_dir(agent_path).map_err(Error::InvalidState)?;
    let repo = Repository::open_bare(&git_dir).map_err(|e| {
        Error::Git(format!(
            "cannot open {}: {}",
            git_dir.display(),
            e.message()
        ))
    })?;
    let head = repo.find_reference("HEAD").ok();
    let resolved = head.as_ref().and_then(|h| h.resolve().ok());
    let Some(commit) = resolved.as_ref().and_then(|r| r.target()) else {
        return Err(Error::BadInput(format!(
            "the HEAD of {} names no commit; pass --base",
            agent_path.display()
        )));
    };
    let name = resolved
        .as_ref()
        .and_then(|r| r.shorthand().map(str::to_string))
        .filter(|_| resolved.as_ref().is_some_and(|r| r.is_branch()))
        .unwrap_or_else(|| commit.to_string());
    if lane.repo.find_commit(commit).is_ok() {
        return Ok((name, commit));
    }
    let scratch = Scratch::create(
        scratch_dir,
        &[
            git_dir.join("objects"),
            lane.target.common_dir.join("objects"),
        ],
        None,
    )?;
    if !scratch.is_commit(commit) {
        return Err(Error::BadInput(format!(
            "the HEAD of {} is not a commit; pass --base",
            agent_path.display()
        )));
    }
    let oversized = lane.repo.odb().and_then(|users| {
        super::object_sizes::first_oversized_history(scratch.repo(), &users, commit, max_file)
    });
    match oversized {
        Ok(None) => {}
        Ok(Some(object)) => {
            return Err(Error::InvalidState(format!(
                "the HEAD of {} holds an object over salvage_max_file ({max_file} bytes): \
                 {object}; nothing of it was brought into the repository, so no child can \
                 start from it; commit without it, or pass --base",
                agent_path.display()
            )))
        }
        Err(e) => {
            return Err(Error::Git(format!(
                "cannot size the objects of {}: {}",
                agent_path.display(),
                e.message()
            )))
        }
    }
    scratch.set_ref("out", commit)?;
    let temp = format!("refs/grove/import/base-{commit}");
    fetch_into(
        &lane.target.common_dir,
        scratch.path(),
        &[("out".into(), temp.clone())],
    )?;
    // The commit stays: unreachable objects this young are never pruned, and the
    // child's branch holds it from its creation on.
    if let Ok(mut reference) = lane.repo.find_reference(&temp) {
        let _ = reference.delete();
    }
    Ok((name, commit))
}

//! Collect: salvage the worktree, bring its branch (and a jailed agent's checkpoints'
//! code) into the user's repository, measure it, remove the worktree, drop an empty
//! branch. Safe to run again after a crash part-way through (the salvage commit of one
//! job is always the same commit).
//!
//! Two steps: `salvage` stages the worktree in a scratch repository of grove's own,
//! outside the repository lane (hashing a big worktree holds up nobody); `finish` runs
//! in the lane and only fetches the result and does the ref bookkeeping. Nothing the
//! agent wrote is trusted: its `.git`, admin dir, config, hooks, index and attributes
//! drivers are never used (see `scratch`); a linked worktree whose `.git`, `gitdir` or
//! `commondir` no longer point where grove made them is kept, not salvaged through.

use super::authorship::{authorship, CommitAuthor};
use super::lane::RepoLane;
use super::own_repo;
use super::scratch::{fetch_into, Scratch, ScratchDir, Stage};
use super::worktree;
use crate::error::Error;
use git2::{BranchType, Oid, Repository};
use std::fs;
use std::path::{Path, PathBuf};

pub struct CollectJob {
    pub agent_id: String,
    /// Paths the worktree setup placed (copies, links): never salvaged.
    pub placed: Vec<String>,
    pub worktree: PathBuf,
    pub branch: String,
    pub base_commit: String,
    pub keep: bool,
    /// What the salvage commit says (its message names the agent).
    pub message: String,
    /// Who authors the salvage commit.
    pub author: CommitAuthor,
    /// The jailed layout: `worktree` is a repository of the agent's own.
    pub jailed: bool,
    /// Cone-mode directories of a sparse checkout.
    pub sparse: Vec<String>,
    /// A directory of grove's for the scratch repository.
    pub scratch: PathBuf,
    /// Files larger than this are left out of the salvage (and the worktree kept).
    pub max_file: u64,
    /// Where grove last left the branch in the user's repository (jailed layout).
    pub head_commit: Option<String>,
    /// Time of the salvage commit, in seconds.
    pub time_s: u64,
    /// A jailed agent's code store, whose checkpoints' code comes in with its branch.
    pub code_store: Option<PathBuf>,
}

#[derive(Debug, Default)]
pub struct Collected {
    pub head_commit: Option<String>,
    pub files_changed: u64,
    pub insertions: u64,
    pub deletions: u64,
    pub branch_exists: bool,
    pub salvaged: bool,
    /// The worktree was removed (not kept).
    pub removed: bool,
    /// Files over the size cap, left out of the salvage (the worktree is kept).
    pub left_out: Vec<String>,
    /// What the agent changed of grove's git layout (the worktree is kept).
    pub tampered: Option<String>,
    /// An object over `salvage_max_file` on a jailed agent's branch: nothing was
    /// brought into the user's repository (the worktree is kept).
    pub oversized: Option<String>,
    /// Checkpoints' code of a jailed agent that stayed out of the user's repository,
    /// each with why (an object over `salvage_max_file`).
    pub code_left_out: Vec<String>,
    /// The checkpoint refs it brought in, some perhaps of checkpoints deleted since.
    pub code_brought: Vec<String>,
    /// The removed worktree's files, for the caller to delete.
    pub trash: Option<worktree::Trash>,
}

/// What the worktree held, staged outside the lane; `finish` brings it in.
#[derive(Default)]
pub struct Salvage {
    scratch: Option<ScratchDir>,
    /// The objects are in the scratch repository, not yet the user's (jailed layout).
    fetch: bool,
    /// The branch's new tip (`refs/heads/out` of the scratch repository when fetched).
    out: Option<Oid>,
    /// What the branch must still point at in the user's repository to be moved.
    expected: Option<Oid>,
    /// The agent's HEAD (or a salvage of it), off its branch: kept under
    /// `refs/grove/salvage/<id>` (`refs/heads/head` of the scratch when fetched).
    head_ref: Option<Oid>,
    salvaged: bool,
    left_out: Vec<String>,
    tampered: Option<String>,
    oversized: Option<String>,
    /// The linked worktree's admin dir, verified.
    admin: Option<PathBuf>,
}

/// Stages what the worktree holds. Outside the lane; `common` is the user's git dir.
pub fn salvage(common: &Path, job: &CollectJob) -> Result<Salvage, Error> {
    if !job.worktree.exists() {
        return Ok(Salvage::default());
    }
    let base = oid(&job.base_commit)?;
    let user_objects = common.join("objects");
    let authorship = authorship(common, job.author, job.message.clone());
    let mut result = Salvage::default();
    let (objects, write_to, tip, head) = if job.jailed {
        let expected = match &job.head_commit {
            Some(head) => oid(head)?,
            None => base,
        };
        result.expected = Some(expected);
        result.fetch = true;
        match own_repo::git_dir(&job.worktree) {
            Ok(git_dir) => {
                let (tip, head) = own_repo::read_tips(&git_dir, &job.branch);
                let objects = vec![git_dir.join("objects"), user_objects];
                (objects, None, tip, head)
            }
            Err(problem) => {
                result.tampered = Some(problem);
                (vec![user_objects], None, Some(expected), None)
            }
        }
    } else {
        let repo = Repository::open(common).map_err(|e| {
            Error::Git(format!("cannot open {}: {}", common.display(), e.message()))
        })?;
        match verify_linked(&repo, common, &job.worktree) {
            Ok(admin) => result.admin = Some(admin),
            Err(problem) => {
                // Nothing is staged through a layout the agent rewrote.
                result.tampered = Some(problem);
                return Ok(result);
            }
        }
        let tip = repo
            .find_reference(&format!("refs/heads/{}", job.branch))
            .ok()
            .and_then(|r| r.target());
        result.expected = tip;
        let head = Repository::open(&job.worktree)
            .ok()
            .and_then(|r| r.head().ok().and_then(|h| h.target()));
        if job.sparse.is_empty() {
            return salvage_linked(common, job, &authorship, &repo, tip, head, result);
        }
        let objects = vec![user_objects.clone()];
        (objects, Some(user_objects), tip.or(Some(base)), head)
    };
    let scratch = Scratch::create(&job.scratch, &objects, write_to.as_deref())?;
    let tip = [tip, head, result.expected, Some(base)]
        .into_iter()
        .flatten()
        .find(|c| scratch.is_commit(*c))
        .ok_or_else(|| Error::Git(format!("salvage: base commit {base} cannot be read")))?;
    let staged = scratch.stage(&Stage {
        worktree: &job.worktree,
        tip,
        placed: &job.placed,
        sparse: &job.sparse,
        max_file: job.max_file,
        index_seed: result.admin.as_ref().map(|a| a.join("index")).as_deref(),
        authorship: &authorship,
        time_s: job.time_s,
        keep_index: job.keep,
    })?;
    crate::faults::point("mid_salvage");
    let out = staged.commit.unwrap_or(tip);
    scratch.set_ref("out", out)?;
    if let Some(head) = head.filter(|h| *h != tip && scratch.is_commit(*h)) {
        if !contains(scratch.repo(), Some(tip), head) {
            scratch.set_ref("head", head)?;
            result.head_ref = Some(head);
        }
    }
    result.salvaged = staged.commit.is_some();
    result.left_out = staged.left_out;
    result.out = Some(out);
    if result.fetch {
        result.oversized = oversized(&scratch, [Some(out), result.head_ref], base, job.max_file)?;
    }
    result.scratch = Some(scratch.into_dir());
    Ok(result)
}

/// The first object over `max` that the jailed agent's tips would bring in.
fn oversized(
    scratch: &Scratch,
    tips: [Option<Oid>; 2],
    base: Oid,
    max: u64,
) -> Result<Option<String>, Error> {
    for tip in tips.into_iter().flatten() {
        let found = super::object_sizes::first_oversized(scratch.repo(), tip, base, max)
            .map_err(|e| Error::Git(format!("cannot size the agent's objects: {}", e.message())))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// A linked worktree whose layout `collect` verified, staged on its HEAD (as the agent
/// left it), with its own index as the seed so that only changed files are hashed. The
/// commit goes onto the branch when HEAD is the branch's tip; otherwise it is kept under
/// `refs/grove/salvage/<id>` and the branch is left alone.
///
/// A big worktree is staged by git child processes rather than libgit2 in the daemon:
/// one `add_all` over a 50,000-file worktree held about 36 MiB of the daemon's heap,
/// one per core at once, while git keeps that memory in a process that exits, and is
/// faster on big trees (preload-index and the index read in parallel). A small one (an
/// index up to 2 MiB) is staged by libgit2, faster there (see `scratch.rs`). The scratch
/// repository is grove's own (its config, no hooks), so nothing the agent wrote steers
/// either.
fn salvage_linked(
    common: &Path,
    job: &CollectJob,
    authorship: &super::authorship::Authorship,
    repo: &Repository,
    tip: Option<Oid>,
    head: Option<Oid>,
    mut result: Salvage,
) -> Result<Salvage, Error> {
    let objects = common.join("objects");
    let scratch = Scratch::create(&job.scratch, std::slice::from_ref(&objects), Some(&objects))?;
    scratch.exclude_as(common)?;
    let on = [head, tip, oid(&job.base_commit).ok()]
        .into_iter()
        .flatten()
        .find(|c| scratch.is_commit(*c))
        .ok_or_else(|| {
            Error::Git(format!(
                "salvage: base commit {} cannot be read",
                job.base_commit
            ))
        })?;
    let staged = scratch.stage(&Stage {
        worktree: &job.worktree,
        tip: on,
        placed: &job.placed,
        sparse: &[],
        max_file: job.max_file,
        index_seed: result.admin.as_ref().map(|a| a.join("index")).as_deref(),
        authorship,
        time_s: job.time_s,
        keep_index: job.keep,
    })?;
    crate::faults::point("mid_salvage");
    result.salvaged = staged.commit.is_some();
    result.left_out = staged.left_out;
    if tip.is_none_or(|t| t == on) {
        result.out = staged.commit;
    } else {
        let made = staged.commit.unwrap_or(on);
        if !contains(repo, tip, made) {
            result.head_ref = Some(made);
        }
    }
    result.scratch = Some(scratch.into_dir());
    Ok(result)
}

/// True when `tip` has `commit` in its history (or is it).
fn contains(repo: &Repository, tip: Option<Oid>, commit: Oid) -> bool {
    tip.is_some_and(|t| t == commit || repo.graph_descendant_of(t, commit).unwrap_or(false))
}

/// In the lane: brings the salvage in, measures the branch, removes the worktree
/// unless it must stay.
pub fn finish(lane: &mut RepoLane, job: &CollectJob, salvage: Salvage) -> Result<Collected, Error> {
    let repo = &lane.repo;
    let base = oid(&job.base_commit)?;
    let mut result = Collected {
        salvaged: salvage.salvaged,
        left_out: salvage.left_out.clone(),
        tampered: salvage.tampered.clone(),
        oversized: salvage.oversized.clone(),
        ..Collected::default()
    };
    // Every process of the agent is gone and this lane is the only other writer of its
    // branch: a lock left on the branch (a git killed mid-commit, a daemon killed
    // mid-update) is stale and would stop the update.
    worktree::clear_stale_ref_lock(repo, &job.branch);
    // First, and whatever becomes of the branch: each checkpoint's code is judged on
    // its own, and what it brings in the branch's fetch need not bring again.
    if let Some(store) = &job.code_store {
        result.code_left_out =
            match super::code_store::bring_in(&lane.target.common_dir, store, job.max_file) {
                Ok(brought) => {
                    result.code_brought = brought.brought;
                    brought.left_out
                }
                Err(e) => vec![format!(
                    "none of it was brought in ({e}); kept at {}",
                    store.display()
                )],
            };
    }
    if salvage.oversized.is_none() {
        import(lane, job, &salvage)?;
    }
    crate::faults::point("after_import");
    let repo = &lane.repo;
    let tip = repo
        .find_branch(&job.branch, BranchType::Local)
        .ok()
        .and_then(|b| b.get().target());
    if let Some(tip) = tip {
        let (files, insertions, deletions) = diffstat(repo, base, tip)?;
        result.head_commit = Some(tip.to_string());
        result.files_changed = files;
        result.insertions = insertions;
        result.deletions = deletions;
    }
    let must_stay =
        result.tampered.is_some() || result.oversized.is_some() || !result.left_out.is_empty();
    if job.keep || must_stay {
        keep(repo, job, &salvage, tip);
    } else {
        result.removed = job.worktree.exists();
        result.trash = worktree::take_out(repo, &job.worktree)?;
    }
    result.branch_exists = tip.is_some();
    if tip == Some(base) && result.removed {
        if let Ok(mut branch) = repo.find_branch(&job.branch, BranchType::Local) {
            branch.delete().map_err(|e| {
                Error::Git(format!(
                    "cannot delete empty branch {}: {}",
                    job.branch,
                    e.message()
                ))
            })?;
        }
        result.branch_exists = false;
    }
    Ok(result)
}

/// Brings the salvage into the user's repository (one hardened fetch, for the jailed
/// layout) and moves the branch onto it, if the branch is still where grove (or the
/// agent, unjailed) left it.
fn import(lane: &RepoLane, job: &CollectJob, salvage: &Salvage) -> Result<(), Error> {
    let repo = &lane.repo;
    let branch_ref = format!("refs/heads/{}", job.branch);
    let current = repo.refname_to_id(&branch_ref).ok();
    let salvage_ref = format!("{}{}", super::refs::SALVAGE_PREFIX, job.agent_id);
    let temp = format!("refs/grove/import/{}", job.agent_id);
    let out = salvage.out.filter(|out| current != Some(*out));
    if let (true, Some(scratch)) = (salvage.fetch, &salvage.scratch) {
        let mut refs = Vec::new();
        if out.is_some() {
            refs.push(("out".to_string(), temp.clone()));
        }
        if salvage.head_ref.is_some() {
            refs.push(("head".to_string(), salvage_ref.clone()));
        }
        if !refs.is_empty() {
            fetch_into(&lane.target.common_dir, scratch.path(), &refs)?;
        }
    } else if let Some(head) = salvage.head_ref {
        repo.reference(
            &salvage_ref,
            head,
            true,
            "grove: agent left HEAD off its branch",
        )
        .map_err(|e| Error::Git(format!("cannot write {salvage_ref}: {}", e.message())))?;
    }
    if salvage.head_ref.is_some() {
        tracing::warn!(agent = %job.agent_id, reference = %salvage_ref, "the agent left HEAD off its branch; kept it");
    }
    let Some(out) = out else {
        return Ok(());
    };
    let moved_since = current.is_some_and(|c| {
        Some(c) != salvage.expected && !repo.graph_descendant_of(out, c).unwrap_or(false)
    });
    if moved_since {
        // The message says the salvage is kept as `temp`: only once that is so.
        if !salvage.fetch {
            repo.reference(&temp, out, true, "grove: salvage kept aside")
                .map_err(|e| {
                    Error::Git(format!(
                        "branch {} moved while grove collected it, and the salvage could not \
                         be kept as {temp}: {}; the work stays in the worktree",
                        job.branch,
                        e.message()
                    ))
                })?;
        }
        return Err(Error::Git(format!(
            "branch {} moved while grove collected it; the salvage is kept as {temp}",
            job.branch
        )));
    }
    repo.reference(&branch_ref, out, true, "grove: collect")
        .map_err(|e| Error::Git(format!("cannot move {branch_ref}: {}", e.message())))?;
    if salvage.fetch {
        if let Ok(mut reference) = repo.find_reference(&temp) {
            let _ = reference.delete();
        }
    }
    Ok(())
}

/// A worktree that stays: its lock (linked layout) would only stop the user from
/// removing it; the jailed agent's own repository follows its branch, so that a later
/// collect starts from there.
fn keep(repo: &Repository, job: &CollectJob, salvage: &Salvage, tip: Option<Oid>) {
    if let Some(wt) = worktree::find(repo, &job.worktree) {
        let _ = wt.unlock();
    }
    let Some(scratch) = salvage.scratch.as_ref().filter(|_| salvage.salvaged) else {
        return;
    };
    if salvage.tampered.is_some() || !job.sparse.is_empty() {
        return;
    }
    // The salvage commit is its HEAD now: the staged index matches it and the files.
    let index = match (&salvage.admin, own_repo::git_dir(&job.worktree)) {
        (Some(admin), _) => admin.join("index"),
        (None, Ok(git_dir)) if job.jailed => {
            let (Some(tip), Ok(own)) = (tip, Repository::open_bare(&git_dir)) else {
                return;
            };
            let name = format!("refs/heads/{}", job.branch);
            if let Err(e) = own.reference(&name, tip, true, "grove: salvage") {
                tracing::warn!(agent = %job.agent_id, error = %e, "cannot move the kept repository's branch");
                return;
            }
            git_dir.join("index")
        }
        _ => return,
    };
    if let Err(e) = fs::copy(scratch.top_index(), &index) {
        tracing::warn!(agent = %job.agent_id, error = %e, "cannot refresh the kept worktree's index");
    }
}

/// Checks that the linked worktree at `worktree` still has the layout grove made:
/// `.git` a regular file naming the admin dir, whose `gitdir` names `.git` back and
/// whose `commondir` is the repository's git dir. Returns the admin dir.
fn verify_linked(repo: &Repository, common: &Path, worktree: &Path) -> Result<PathBuf, String> {
    let canonical = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let dot_git = worktree.join(".git");
    let meta = fs::symlink_metadata(&dot_git).map_err(|e| format!("{}: {e}", dot_git.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "{} is no longer the file grove made (the agent replaced it)",
            dot_git.display()
        ));
    }
    let Some(wt) = worktree::find(repo, worktree) else {
        return Err(format!(
            "the repository no longer lists {} as its worktree",
            worktree.display()
        ));
    };
    let admin = canonical(&common.join("worktrees").join(wt.name().unwrap_or_default()));
    let text = fs::read_to_string(&dot_git).unwrap_or_default();
    let named = text
        .strip_prefix("gitdir:")
        .map(|p| p.trim())
        .map(|p| canonical(&worktree.join(p)));
    if named.as_deref() != Some(admin.as_path()) {
        return Err(format!(
            "{} points at {} instead of {}",
            dot_git.display(),
            text.trim(),
            admin.display()
        ));
    }
    let back = fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
    if canonical(Path::new(back.trim())) != canonical(&dot_git) {
        return Err(format!(
            "{}/gitdir names {} instead of {}",
            admin.display(),
            back.trim(),
            dot_git.display()
        ));
    }
    let commondir = fs::read_to_string(admin.join("commondir")).unwrap_or_default();
    if canonical(&admin.join(commondir.trim())) != canonical(common) {
        return Err(format!(
            "{}/commondir names {} instead of {}",
            admin.display(),
            commondir.trim(),
            common.display()
        ));
    }
    Ok(admin)
}

fn oid(text: &str) -> Result<Oid, Error> {
    Oid::from_str(text).map_err(|source| Error::BadCommitId {
        what: "commit id",
        text: text.to_string(),
        source,
    })
}

/// Files changed, insertions and deletions of `tip` against its merge-base with `base`.
fn diffstat(repo: &Repository, base: Oid, tip: Oid) -> Result<(u64, u64, u64), Error> {
    let git = |e: git2::Error| Error::Git(format!("diffstat: {}", e.message()));
    let from = repo.merge_base(base, tip).unwrap_or(base);
    let old = repo.find_commit(from).and_then(|c| c.tree()).map_err(git)?;
    let new = repo.find_commit(tip).and_then(|c| c.tree()).map_err(git)?;
    let stats = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .and_then(|d| d.stats())
        .map_err(git)?;
    Ok((
        stats.files_changed() as u64,
        stats.insertions() as u64,
        stats.deletions() as u64,
    ))
}

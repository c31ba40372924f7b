//! The code an agent had when it wrote a checkpoint: its branch tip and a tree of its
//! worktree as it is, written through a scratch index of grove's (never the agent's
//! index, never its branch). Only agents' writes pay for it; the user's record nothing.
//!
//! It is written in process with libgit2, which runs no hook, no fsmonitor and no
//! filter driver (none is registered), reads the worktree with lstat (a symlink is
//! recorded as a link, never followed; FIFOs and sockets are skipped), and is steered
//! only by the user's repository and the user's own git config: the repository opened
//! is always the user's common git dir. Of a jailed agent's own repository only its
//! branch tip is read (refs, no config that could run anything); its code's objects
//! and refs go to its code store (`git::code_store`), never the user's repository,
//! until its collect. Of an agent that is not jailed, its index seeds the scratch
//! index.

use super::code_ref::Held;
use super::scan;
use super::store::DroppedCode;
use crate::error::Error;
use crate::git::{code_store, own_repo};
use git2::build::TreeUpdateBuilder;
use git2::{FileMode, Oid, Repository};
use grove_proto::state::CodeRef;
use grove_proto::types::AgentRecord;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The scratch index of an agent's checkpoints, in its private state directory: kept
/// between checkpoints, so that unchanged files are found by their stat data and only
/// what changed is hashed. It goes once the agent is collected.
pub const CHECKPOINT_INDEX: &str = "checkpoint.index";

/// The tree of the scratch index as last written, beside it, and when it was last
/// written in full: the next checkpoint writes only the trees along the paths that
/// changed.
const CHECKPOINT_TREE: &str = "checkpoint.tree";

/// `git update-index --skip-worktree`: the entry is not in the worktree on purpose
/// (a sparse checkout).
const SKIP_WORKTREE: u16 = 0x4000;

/// Records the code of `record` (a running agent) now, held by a ref until its
/// checkpoint is stored (see `code_ref`). Files over `max_file` bytes are left out, as
/// salvage leaves them out: each checkpoint's objects land in the user's repository
/// (a jailed agent's at its collect). Reads the whole worktree: call it off the async
/// threads.
pub fn record(
    record: &AgentRecord,
    agent_dir: &Path,
    max_file: u64,
    one_at_a_time: &Mutex<()>,
) -> Result<(CodeRef, Held), Error> {
    // One checkpoint of an agent at a time: they share its scratch index.
    let _held = one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = agent_dir.join(CHECKPOINT_INDEX);
    let repo = users_repo(record)?;
    let store = jailed_store(record, agent_dir, &repo)?;
    let commit = branch_tip(record, &repo);
    // Only this daemon writes the scratch index, one checkpoint at a time: a lock file
    // there now is one a crashed daemon left.
    let _ = std::fs::remove_file(agent_dir.join(format!("{CHECKPOINT_INDEX}.lock")));
    let last_tree = agent_dir.join(CHECKPOINT_TREE);
    if !scratch.exists() {
        let _ = std::fs::remove_file(&last_tree);
        seed(record, &scratch);
    }
    let tree = match write_tree(&repo, &record.worktree, &scratch, &last_tree, max_file) {
        Ok(tree) => tree,
        Err(e) => {
            // A scratch index a crash left half-written costs one fresh seed next time.
            let _ = std::fs::remove_file(&scratch);
            let _ = std::fs::remove_file(&last_tree);
            return Err(e);
        }
    };
    let (tree, left_out) = tree;
    if !left_out.is_empty() {
        tracing::warn!(agent = %record.id, files = ?left_out, max_file, "checkpoint code left out files over salvage_max_file");
    }
    let code = CodeRef {
        commit,
        tree: tree.to_string(),
        repo: Some(record.repo.clone()),
        left_out,
        held_by: record.jail.then(|| record.id.clone()),
    };
    let (refs, refs_path) = match &store {
        Some((store, path)) => (store, path.as_path()),
        None => (&repo, record.repo.as_path()),
    };
    let held = super::code_ref::hold(&repo, refs, refs_path, &record.id, &record.session, &code)?;
    Ok((code, held))
}

/// A jailed agent's code store, where its checkpoints' objects go from now on: `repo`
/// (the user's, whose config still steers the recording) writes its objects there and
/// reads the user's through it.
fn jailed_store(
    record: &AgentRecord,
    agent_dir: &Path,
    repo: &Repository,
) -> Result<Option<(Repository, PathBuf)>, Error> {
    if !record.jail {
        return Ok(None);
    }
    let path = code_store::path(agent_dir);
    let store = code_store::open(&path, repo.path())?;
    store
        .odb()
        .and_then(|odb| repo.set_odb(&odb))
        .map_err(|e| {
            Error::Git(format!(
                "cannot write to {}: {}",
                path.display(),
                e.message()
            ))
        })?;
    Ok(Some((store, path)))
}

/// The user's repository (its common git dir), with the agent's worktree as its work
/// tree. A linked worktree's own git dir (and a jailed agent's repository, config
/// included) is the agent's to write: it is never opened here, so nothing the agent
/// wrote there steers the recording, and the tree's objects land in the user's
/// repository (a jailed agent's in its code store) with every blob it needs (where a
/// fork's spawn needs them).
fn users_repo(record: &AgentRecord) -> Result<Repository, Error> {
    let git = |what: &Path, e: git2::Error| {
        Error::Git(format!("cannot open {}: {}", what.display(), e.message()))
    };
    let common = Repository::open(&record.repo)
        .map_err(|e| git(&record.repo, e))?
        .commondir()
        .to_path_buf();
    let repo = Repository::open_bare(&common).map_err(|e| git(&common, e))?;
    repo.set_workdir(&record.worktree, false)
        .map_err(|e| git(&record.worktree, e))?;
    Ok(repo)
}

/// `git add -A` into the scratch index, then its tree: the last one with the trees
/// along the changed paths rewritten (all of them the first time, or when that cannot
/// be done, e.g. a file became a directory).
fn write_tree(
    repo: &Repository,
    worktree: &Path,
    scratch: &Path,
    last_tree: &Path,
    max_file: u64,
) -> Result<(Oid, Vec<String>), Error> {
    let git = |step: &str, e: git2::Error| {
        Error::Git(format!(
            "{step} of {} failed: {}",
            worktree.display(),
            e.message()
        ))
    };
    let (mut index, started_again) =
        open_scratch(scratch).map_err(|e| git("reading the scratch index", e))?;
    let now = now_secs();
    let last = read_last_tree(last_tree)
        .filter(|_| !started_again)
        .filter(|last| now.saturating_sub(last.full_at) < FULL_TREE_EVERY_SECS);
    let index_mtime = mtime_of(scratch);
    repo.set_index(&mut index)
        .map_err(|e| git("reading the scratch index", e))?;
    let mut left_out = Vec::new();
    let changed = add_changes(repo, &mut index, index_mtime, max_file, &mut left_out)
        .map_err(|e| git("reading the worktree", e))?;
    let untouched = changed.is_none();
    let changed = changed.unwrap_or_default();
    let updated = last.and_then(|last| {
        let tree = updated_tree(repo, last.tree, &changed).ok()?;
        Some(LastTree { tree, ..last })
    });
    let written = match updated {
        Some(written) => written,
        None => LastTree {
            tree: index
                .write_tree_to(repo)
                .map_err(|e| git("writing the tree", e))?,
            full_at: now,
        },
    };
    // The tree is saved before the index: after a crash between the two, the next
    // checkpoint finds the same changes again and applies them to a tree that has them.
    save_last_tree(last_tree, &written).map_err(Error::io("save", last_tree))?;
    // The stat data kept is what spares the next checkpoint the hashing.
    if !untouched {
        index
            .write()
            .map_err(|e| git("saving the scratch index", e))?;
    }
    Ok((written.tree, left_out))
}

/// A path `add_changes` changed, with its entry now (none: removed).
type Change = (PathBuf, Option<(Oid, u32)>);

/// `git add -A` into `index`: what differs from the worktree is added or removed, and
/// the stat data of files found unchanged is refreshed (or they would be hashed again
/// at every checkpoint). Entries the worktree lacks on purpose (skip-worktree, from a
/// sparse checkout's index) stay as they are. Ignored files are left out. `None`:
/// the stat walk vouched for every file, the index is as it was.
fn add_changes(
    repo: &Repository,
    index: &mut git2::Index,
    index_mtime: Option<(i64, i64)>,
    max_file: u64,
    left_out: &mut Vec<String>,
) -> Result<Option<Vec<Change>>, git2::Error> {
    use std::os::unix::ffi::OsStrExt;
    let entries: Vec<scan::Entry> = index.iter().map(scan_entry).collect();
    let mut options = git2::DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true)
        .update_index(true);
    if let Some(worktree) = repo.workdir() {
        // libgit2 looks only at what the stat walk could not vouch for.
        if let Some(paths) = scan::candidates(worktree, &entries, index_mtime) {
            if paths.is_empty() {
                return Ok(None);
            }
            for path in paths {
                options.pathspec(path);
            }
            options.disable_pathspec_match(true);
        }
    }
    let sparse: HashSet<&[u8]> = entries
        .iter()
        .filter(|e| e.sparse)
        .map(|e| e.path.as_slice())
        .collect();
    let deltas: Vec<(PathBuf, bool)> = repo
        .diff_index_to_workdir(Some(index), Some(&mut options))?
        .deltas()
        .filter_map(|d| {
            let path = d.new_file().path().or_else(|| d.old_file().path())?;
            Some((path.to_path_buf(), d.new_file().exists()))
        })
        .filter(|(path, _)| !sparse.contains(path.as_os_str().as_bytes()))
        .collect();
    let mut changed = Vec::with_capacity(deltas.len());
    let over_cap = |path: &Path| {
        repo.workdir()
            .and_then(|root| std::fs::symlink_metadata(root.join(path)).ok())
            .is_some_and(|meta| meta.is_file() && meta.len() > max_file)
    };
    for (path, exists) in deltas {
        if exists && over_cap(&path) {
            // Out of the tree, and out of the index too, so that the next checkpoint
            // looks at it again rather than keeping an older, smaller version.
            let _ = index.remove_path(&path);
            left_out.push(path.display().to_string());
        } else if exists {
            index.add_path(&path)?;
        } else {
            index.remove_path(&path)?;
        }
        // A nested repository comes as `dir/`; its entry is `dir`.
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(
            path.as_os_str()
                .as_bytes()
                .strip_suffix(b"/")
                .unwrap_or(path.as_os_str().as_bytes()),
        ));
        let entry = index.get_path(&path, 0).map(|e| (e.id, e.mode));
        changed.push((path, entry));
    }
    Ok(Some(changed))
}

/// What the stat walk compares of an index entry: a conflict's stages are left to
/// libgit2.
fn scan_entry(entry: git2::IndexEntry) -> scan::Entry {
    let stage = (entry.flags >> 12) & 3;
    let sparse = entry.flags_extended & SKIP_WORKTREE != 0;
    let stat = (stage == 0).then_some(scan::Tracked {
        mode: entry.mode,
        size: entry.file_size,
        mtime: (entry.mtime.seconds(), entry.mtime.nanoseconds()),
        ctime: (entry.ctime.seconds(), entry.ctime.nanoseconds()),
        ino: entry.ino,
        uid: entry.uid,
        gid: entry.gid,
    });
    scan::Entry {
        path: entry.path,
        stat,
        sparse,
    }
}

/// When the index file was written, as libgit2 compares it with a file's mtime to tell
/// a racily clean entry.
fn mtime_of(path: &Path) -> Option<(i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.mtime(), meta.mtime_nsec()))
}

/// `last` with `changed` applied: only the trees along those paths are written.
fn updated_tree(repo: &Repository, last: Oid, changed: &[Change]) -> Result<Oid, git2::Error> {
    if changed.is_empty() {
        return Ok(last);
    }
    let base = repo.find_tree(last)?;
    let mut update = TreeUpdateBuilder::new();
    for (path, entry) in changed {
        match entry {
            Some((id, mode)) => update.upsert(path, *id, file_mode(*mode)?),
            None => update.remove(path),
        };
    }
    update.create_updated(repo, &base)
}

fn file_mode(mode: u32) -> Result<FileMode, git2::Error> {
    match mode {
        0o100644 => Ok(FileMode::Blob),
        0o100755 => Ok(FileMode::BlobExecutable),
        0o120000 => Ok(FileMode::Link),
        0o160000 => Ok(FileMode::Commit),
        other => Err(git2::Error::from_str(&format!("index mode {other:o}"))),
    }
}

/// How often the whole tree is written again rather than updated: a full write checks
/// that every object it names exists and freshens the trees, so that `git gc` never
/// prunes a subtree an updated tree still names but no ref reaches (an agent's old
/// uncommitted work), and a scratch index naming pruned blobs is dropped and seeded
/// again, as with any failed checkpoint.
const FULL_TREE_EVERY_SECS: u64 = 3600;

/// The last tree written, and when the last full write was (unix seconds).
struct LastTree {
    tree: Oid,
    full_at: u64,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn read_last_tree(path: &Path) -> Option<LastTree> {
    let text = std::fs::read_to_string(path).ok()?;
    let (tree, full_at) = text.trim().split_once(' ')?;
    Some(LastTree {
        tree: Oid::from_str(tree).ok()?,
        full_at: full_at.parse().ok()?,
    })
}

fn save_last_tree(path: &Path, last: &LastTree) -> std::io::Result<()> {
    let part = path.with_extension("tree.part");
    std::fs::write(&part, format!("{} {}\n", last.tree, last.full_at))?;
    std::fs::rename(&part, path)
}

/// The scratch index goes with the agent's work (at collect).
pub fn forget(agent_dir: &Path) {
    let _ = std::fs::remove_file(agent_dir.join(CHECKPOINT_INDEX));
    let _ = std::fs::remove_file(agent_dir.join(CHECKPOINT_TREE));
}

/// The scratch index, and whether it was started again: one libgit2 cannot read (a
/// split or sparse index copied from the agent's, a file a crash cut short) is
/// started again, empty.
fn open_scratch(scratch: &Path) -> Result<(git2::Index, bool), git2::Error> {
    match git2::Index::open(scratch) {
        Ok(index) => Ok((index, false)),
        Err(_) => {
            let _ = std::fs::remove_file(scratch);
            Ok((git2::Index::open(scratch)?, true))
        }
    }
}

/// The scratch index starts as a copy of the agent's own, stat data included, so that
/// the first checkpoint hashes only what changed. A jailed agent's index is its own to
/// write (and names objects of its repository): its scratch index starts empty, and the
/// first checkpoint hashes the whole worktree (so does one whose copy fails).
fn seed(record: &AgentRecord, scratch: &Path) {
    if record.jail {
        return;
    }
    if let Ok(own) = Repository::open(&record.worktree) {
        let _ = std::fs::copy(own.path().join("index"), scratch);
    }
}

/// The agent's branch tip, read with libgit2 (no hook, filter or helper runs): in its
/// own repository when jailed, else in the user's.
fn branch_tip(record: &AgentRecord, users: &Repository) -> Option<String> {
    if record.jail {
        let git_dir = own_repo::git_dir(&record.worktree).ok()?;
        return own_repo::read_tips(&git_dir, &record.branch)
            .0
            .map(|oid| oid.to_string());
    }
    let reference = users
        .find_reference(&format!("refs/heads/{}", record.branch))
        .ok()?;
    reference.target().map(|oid| oid.to_string())
}

pub use crate::git::CHECKPOINT_REFS;

/// Where `state.code` names the code of checkpoint `at` of `session`.
pub fn checkpoint_ref(session: &str, at: u64) -> String {
    format!("{CHECKPOINT_REFS}{session}/{at}")
}

/// Deletes the `refs/grove/checkpoints/<session>/<n>` of checkpoints that were deleted,
/// off the state task (it touches the user's repositories), but those in `keep`.
pub fn drop_refs_later(dropped: DroppedCode) {
    if dropped.is_empty() {
        return;
    }
    tokio::task::spawn_blocking(move || {
        for (repo, ids) in &dropped.repos {
            if let Err(e) = drop_refs(repo, &dropped.session, ids.as_deref(), &dropped.keep) {
                tracing::warn!(
                    session = %dropped.session,
                    repo = %repo.display(),
                    error = %e.message(),
                    "cannot delete the refs of deleted checkpoints"
                );
            }
        }
    });
}

/// Tidies, off the caller's task, the refs a jailed agent's collect just brought into
/// `repo` from its code store, where neither the deletion of a checkpoint nor the
/// settling at start reached them: a hold a crash left there is settled, and a ref of a
/// checkpoint deleted meanwhile goes.
pub fn tidy_brought_later(db: crate::db::Db, repo: PathBuf, names: Vec<String>) {
    tokio::spawn(async move {
        let dropped = async {
            super::code_ref::settle_brought(&db, &repo, &names).await?;
            let orphans = db
                .call(move |conn| super::store::orphan_refs(conn, names))
                .await?;
            if orphans.is_empty() {
                return Ok(());
            }
            tokio::task::spawn_blocking(move || {
                Repository::open(&repo).and_then(|r| delete_refs(&r, &orphans))
            })
            .await?
            .map_err(|e| Error::Git(e.message().to_string()))
        };
        if let Err(e) = dropped.await {
            tracing::warn!(error = %e, "cannot tidy the refs a jailed agent's collect brought in");
        }
    });
}

/// libgit2 only reads and deletes refs here: no hook runs.
fn drop_refs(
    path: &Path,
    session: &str,
    ids: Option<&[u64]>,
    keep: &HashSet<String>,
) -> Result<(), git2::Error> {
    let repo = Repository::open(path)?;
    let names: Vec<String> = match ids {
        Some(ids) => ids.iter().map(|&id| checkpoint_ref(session, id)).collect(),
        None => refs_under(&repo, &format!("{CHECKPOINT_REFS}{session}/"))?,
    };
    let dropped: Vec<String> = names
        .into_iter()
        .filter(|name| !keep.contains(name))
        .collect();
    delete_refs(&repo, &dropped)
}

/// The refs whose names start with `prefix`.
fn refs_under(repo: &Repository, prefix: &str) -> Result<Vec<String>, git2::Error> {
    let names = repo
        .references_glob(&format!("{prefix}*"))?
        .names()
        .filter_map(Result::ok)
        .filter(|name| name.starts_with(prefix))
        .map(String::from)
        .collect();
    Ok(names)
}

/// Deletes `names` from `repo`; one already gone is no error.
fn delete_refs(repo: &Repository, names: &[String]) -> Result<(), git2::Error> {
    for name in names {
        match repo.find_reference(name) {
            Ok(mut reference) => reference.delete()?,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Deletes the checkpoint refs no checkpoint names any more: those of checkpoints
/// compacted before their refs were deleted with them, which nothing else deletes.
/// Once at start, off the state task: refs are listed first, then the rows read, so a
/// ref made meanwhile (for a checkpoint that exists) is never one of those deleted.
pub async fn sweep_orphan_refs(db: crate::db::Db) {
    let swept = async {
        let repos = db.call(|conn| super::store::code_repos(conn)).await?;
        super::code_ref::settle_left(&db, &repos).await?;
        let listed = tokio::task::spawn_blocking(move || {
            repos
                .into_iter()
                .filter_map(|repo| {
                    let names = Repository::open(&repo)
                        .and_then(|r| refs_under(&r, CHECKPOINT_REFS))
                        .ok()?;
                    (!names.is_empty()).then_some((repo, names))
                })
                .collect::<Vec<_>>()
        })
        .await?;
        for (repo, names) in listed {
            let orphans = db
                .call(move |conn| super::store::orphan_refs(conn, names))
                .await?;
            if orphans.is_empty() {
                continue;
            }
            tokio::task::spawn_blocking(move || {
                Repository::open(&repo).and_then(|r| delete_refs(&r, &orphans))
            })
            .await?
            .map_err(|e| Error::Git(e.message().to_string()))?;
        }
        Ok::<_, Error>(())
    };
    if let Err(e) = swept.await {
        tracing::warn!(error = %e, "cannot sweep the refs of deleted checkpoints");
    }
}

//! The code an agent had when it wrote a checkpoint: its branch tip and a tree of its
//! worktree as it is, written through a scratch index of grove's (never the agent's
//! index, never its branch). Only agents' writes pay for it; the user's record nothing.

use crate::error::Error;
use crate::git::hardened_git;
use crate::git::own_repo;
use grove_proto::state::CodeRef;
use grove_proto::types::AgentRecord;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The scratch index of an agent's checkpoints, in its private state directory: kept
/// between checkpoints, so that `git add -A` finds unchanged files by their stat data
/// and hashes only what changed. It goes once the agent is collected.
pub const CHECKPOINT_INDEX: &str = "checkpoint.index";

/// `git` arguments naming the repository and worktree.
struct Layout {
    args: Vec<std::ffi::OsString>,
}

/// Records the code of `record` (a running agent) now. Runs git: call it off the async
/// threads.
pub fn record(record: &AgentRecord, agent_dir: &Path) -> Result<CodeRef, Error> {
    let lock = agent_lock(&record.id);
    // One checkpoint of an agent at a time: they share its scratch index.
    let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = agent_dir.join(CHECKPOINT_INDEX);
    let commit = branch_tip(record);
    let layout = layout(record)?;
    // Only this daemon writes the scratch index, one checkpoint at a time: a lock file
    // there now is a git's that a crashed daemon took down with it.
    let _ = std::fs::remove_file(agent_dir.join(format!("{CHECKPOINT_INDEX}.lock")));
    let run = |args: &[&str]| run_git(&layout, Some(&scratch), &record.worktree, args);
    if !scratch.exists() {
        seed(record, &layout, &scratch)?;
    }
    if let Err(e) = run(&["add", "-A", "--", "."]) {
        // A scratch index a crash left half-written costs one fresh seed next time.
        let _ = std::fs::remove_file(&scratch);
        return Err(e);
    }
    let tree = String::from_utf8_lossy(&run(&["write-tree"])?)
        .trim()
        .to_string();
    Ok(CodeRef {
        commit,
        tree,
        repo: Some(record.repo.clone()),
    })
}

/// The scratch index and its lock go with the agent's work (at collect).
pub fn forget(id: &str, agent_dir: &Path) {
    locks().lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    let _ = std::fs::remove_file(agent_dir.join(CHECKPOINT_INDEX));
}

fn locks() -> &'static Mutex<HashMap<String, Arc<Mutex<()>>>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    LOCKS.get_or_init(Default::default)
}

fn agent_lock(id: &str) -> Arc<Mutex<()>> {
    let mut all = locks().lock().unwrap_or_else(|e| e.into_inner());
    all.entry(id.to_string()).or_default().clone()
}

/// A linked worktree is reached through its own git dir (the user's repository). A
/// jailed agent's repository, config included, is the agent's to write, and git run
/// with that config would run whatever filter it names outside the jail: its worktree
/// is read through the user's repository instead, and the tree lands there with every
/// blob it needs (where a fork's spawn needs it), whatever becomes of the agent's
/// repository. The agent's objects are not borrowed: git then writes each blob the
/// user's repository lacks, committed or not.
fn layout(record: &AgentRecord) -> Result<Layout, Error> {
    if !record.jail {
        return Ok(Layout {
            args: vec!["-C".into(), record.worktree.clone().into_os_string()],
        });
    }
    let common = git2::Repository::open(&record.repo)
        .map_err(|e| {
            Error::Git(format!(
                "cannot open {}: {}",
                record.repo.display(),
                e.message()
            ))
        })?
        .commondir()
        .to_path_buf();
    let mut git_dir_arg = std::ffi::OsString::from("--git-dir=");
    git_dir_arg.push(&common);
    let mut work_tree_arg = std::ffi::OsString::from("--work-tree=");
    work_tree_arg.push(&record.worktree);
    Ok(Layout {
        args: vec![git_dir_arg, work_tree_arg],
    })
}

/// Runs git on the agent's worktree; with `index`, on that index (not the agent's).
fn run_git(
    layout: &Layout,
    index: Option<&Path>,
    worktree: &Path,
    args: &[&str],
) -> Result<Vec<u8>, Error> {
    let mut git = hardened_git();
    git.args(&layout.args);
    crate::git::output_on_index(git, index, worktree, args)
}

/// The scratch index starts as a copy of the agent's own, stat data included, so that
/// the first `add -A` hashes only what changed. A jailed agent's index is its own to
/// write (and names objects of its repository): its scratch index starts empty, and the
/// first checkpoint hashes the whole worktree.
fn seed(record: &AgentRecord, layout: &Layout, scratch: &Path) -> Result<(), Error> {
    if record.jail {
        return Ok(());
    }
    let index = run_git(
        layout,
        None,
        &record.worktree,
        &["rev-parse", "--path-format=absolute", "--git-path", "index"],
    )?;
    let index = PathBuf::from(String::from_utf8_lossy(&index).trim());
    match std::fs::copy(&index, scratch) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Internal(format!(
            "cannot copy {}: {e}",
            index.display()
        ))),
    }
}

/// The agent's branch tip, read with libgit2 (no hook, filter or helper runs): in its
/// own repository when jailed, else in the user's.
fn branch_tip(record: &AgentRecord) -> Option<String> {
    if record.jail {
        let git_dir = own_repo::git_dir(&record.worktree).ok()?;
        return own_repo::read_tips(&git_dir, &record.branch)
            .0
            .map(|oid| oid.to_string());
    }
    let repo = git2::Repository::open(&record.repo).ok()?;
    let reference = repo
        .find_reference(&format!("refs/heads/{}", record.branch))
        .ok()?;
    reference.target().map(|oid| oid.to_string())
}

//! The refs that keep a checkpoint's code in the user's repository from the moment it
//! is recorded until its checkpoint goes, so that no `git gc --prune=now` of the user's
//! can take it (state-semantics.md, 29 and 30). A recorded tree has no checkpoint id
//! yet: a commit of it is held at once by `refs/grove/recording/<agent>/<commit>`, and
//! once the checkpoint is stored, `refs/grove/checkpoints/<session>/<n>` names it and
//! the recording ref goes. One a crash left between the two is settled at start.
//! Only libgit2 writes these refs: no hook, filter or helper runs.

use super::code::checkpoint_ref;
use crate::db::Db;
use crate::error::Error;
use crate::git::authorship::Identity;
use git2::{Oid, Repository};
use grove_proto::state::CodeRef;
use rusqlite::params;
use std::path::{Path, PathBuf};

pub use crate::git::RECORDING_REFS;

/// A recorded tree's commit, held by its recording ref.
#[derive(Debug, Clone)]
pub struct Held {
    pub repo: PathBuf,
    pub commit: Oid,
    pub recording: String,
}

fn failed(what: &'static str, repo: &Path) -> impl FnOnce(git2::Error) -> Error {
    let repo = repo.to_path_buf();
    move |source| Error::CodeRef { what, repo, source }
}

/// A commit of `code`'s tree, on the branch tip it recorded when the user's repository
/// has that commit (a jailed agent's commits arrive there only at collect).
fn commit_of_tree(repo: &Repository, code: &CodeRef, message: &str) -> Result<Oid, git2::Error> {
    let tree = repo.find_tree(Oid::from_str(&code.tree)?)?;
    let parent = code
        .commit
        .as_deref()
        .and_then(|c| Oid::from_str(c).ok())
        .and_then(|c| repo.find_commit(c).ok());
    let grove = Identity::grove();
    let signature = git2::Signature::now(&grove.name, &grove.email)?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    repo.commit(None, &signature, &signature, message, &tree, &parents)
}

/// Holds the tree just recorded for `agent`: its commit written through `objects`, the
/// ref in `refs`, found at `path` (the user's repository, or a jailed agent's code
/// store until its collect).
pub fn hold(
    objects: &Repository,
    refs: &Repository,
    path: &Path,
    agent: &str,
    session: &str,
    code: &CodeRef,
) -> Result<Held, Error> {
    let message = format!("grove: the code of a checkpoint of session {session}\n");
    let commit = commit_of_tree(objects, code, &message)
        .map_err(failed("commit the recorded tree", path))?;
    let recording = format!("{RECORDING_REFS}{agent}/{commit}");
    refs.reference(&recording, commit, true, "grove: checkpoint recorded")
        .map_err(failed("hold the recorded tree", path))?;
    Ok(Held {
        repo: path.to_path_buf(),
        commit,
        recording,
    })
}

/// Names the held commit as checkpoint `at` of `session`, and drops the hold (`at`
/// none: the update was refused, only the hold goes). Call it off the async threads.
pub fn settle(held: &Held, session: &str, at: Option<u64>) -> Result<(), Error> {
    let repo = Repository::open(&held.repo).map_err(failed("open the repository", &held.repo))?;
    if let Some(at) = at {
        repo.reference(
            &checkpoint_ref(session, at),
            held.commit,
            true,
            "grove: checkpoint stored",
        )
        .map_err(failed("name the code of a checkpoint", &held.repo))?;
    }
    delete(&repo, &held.recording).map_err(failed("drop a recording ref", &held.repo))
}

/// [`settle`] on the blocking threads; a failure is logged (the checkpoint stands).
pub async fn settle_off_thread(held: Held, session: String, at: Option<u64>) {
    let settled = tokio::task::spawn_blocking(move || settle(&held, &session, at)).await;
    match settled {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot name the code of a checkpoint"),
        Err(e) => tracing::warn!(error = %e, "cannot name the code of a checkpoint"),
    }
}

fn delete(repo: &Repository, name: &str) -> Result<(), git2::Error> {
    match repo.find_reference(name) {
        Ok(mut reference) => reference.delete(),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The commit `refs/grove/checkpoints/<session>/<at>` names, made (and the ref pointed
/// at it) if the ref is missing or names another tree; with its tree.
pub fn name_code(
    path: &Path,
    session: &str,
    at: u64,
    code: &CodeRef,
) -> Result<(String, String), Error> {
    let repo = Repository::open(path).map_err(failed("open the repository", path))?;
    let reference = checkpoint_ref(session, at);
    let tree_id = Oid::from_str(&code.tree).ok();
    if tree_id.and_then(|t| repo.find_tree(t).ok()).is_none() {
        return Err(Error::NotFound(format!(
            "the tree {} recorded at checkpoint {at} of `{session}` is no longer in {} \
             (pruned by git gc before grove held it by a ref?)",
            code.tree,
            path.display()
        )));
    }
    if let Ok(commit) = repo
        .find_reference(&reference)
        .and_then(|r| r.peel_to_commit())
    {
        if Some(commit.tree_id()) == tree_id {
            return Ok((commit.id().to_string(), code.tree.clone()));
        }
    }
    let message = format!("grove: the code of checkpoint {at} of session {session}\n");
    let commit =
        commit_of_tree(&repo, code, &message).map_err(failed("commit the recorded tree", path))?;
    repo.reference(&reference, commit, true, "grove: state.code")
        .map_err(failed("name the code of a checkpoint", path))?;
    Ok((commit.to_string(), code.tree.clone()))
}

/// Recording refs a crash left in `repos`: each checkpoint of their agent that recorded
/// their tree gets its ref (if it has none), then the hold goes. Listed before the rows
/// are read: a hold made meanwhile is not seen, and one whose update is stored later
/// is named by its own request.
pub async fn settle_left(db: &Db, repos: &[PathBuf]) -> Result<(), Error> {
    for path in repos {
        settle_holds(db, path, |_| true).await?;
    }
    Ok(())
}

/// Of the refs a jailed agent's collect brought into `path` from its code store, the
/// holds a crash left there, settled as [`settle_left`] settles the user's repository's
/// at start (the agent has ended: none of its holds waits for its update any more).
pub async fn settle_brought(db: &Db, path: &Path, names: &[String]) -> Result<(), Error> {
    let holds: std::collections::HashSet<String> = names
        .iter()
        .filter(|name| name.starts_with(RECORDING_REFS))
        .cloned()
        .collect();
    if holds.is_empty() {
        return Ok(());
    }
    settle_holds(db, path, move |name| holds.contains(name)).await
}

/// The recording refs of `path` that `pick` names: each checkpoint of their agent that
/// recorded their tree gets its ref, then the hold goes.
async fn settle_holds(
    db: &Db,
    path: &Path,
    pick: impl Fn(&str) -> bool + Send + 'static,
) -> Result<(), Error> {
    let listed = {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || left_holds(&path)).await?
    };
    for (name, agent, commit, tree) in listed.into_iter().filter(|h| pick(&h.0)) {
        let rows = db
            .call(move |conn| checkpoints_of(conn, &agent, &tree))
            .await?;
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || adopt(&path, &name, commit, &rows)).await??;
    }
    Ok(())
}

/// The recording refs of `path`: name, agent, commit and its tree.
fn left_holds(path: &Path) -> Vec<(String, String, Oid, String)> {
    let Ok(repo) = Repository::open(path) else {
        return Vec::new();
    };
    let Ok(refs) = repo.references_glob(&format!("{RECORDING_REFS}*")) else {
        return Vec::new();
    };
    let mut holds = Vec::new();
    for reference in refs.flatten() {
        let Some(name) = reference.name().map(String::from) else {
            continue;
        };
        let Some((agent, _)) = name
            .strip_prefix(RECORDING_REFS)
            .and_then(|rest| rest.split_once('/'))
        else {
            continue;
        };
        if let Ok(commit) = reference.peel_to_commit() {
            let tree = commit.tree_id().to_string();
            holds.push((name.clone(), agent.to_string(), commit.id(), tree));
        }
    }
    holds
}

/// The checkpoints `agent` wrote that recorded `tree`.
fn checkpoints_of(
    conn: &rusqlite::Connection,
    agent: &str,
    tree: &str,
) -> rusqlite::Result<Vec<(String, u64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session, id FROM checkpoints
         WHERE writer = ?1 AND code IS NOT NULL AND json_extract(code, '$.tree') = ?2",
    )?;
    let rows = stmt.query_map(params![agent, tree], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
    })?;
    rows.collect()
}

/// Names `commit` for each checkpoint of `rows` that has no ref, then drops `hold`.
fn adopt(path: &Path, hold: &str, commit: Oid, rows: &[(String, u64)]) -> Result<(), Error> {
    let repo = Repository::open(path).map_err(failed("open the repository", path))?;
    for (session, at) in rows {
        let name = checkpoint_ref(session, *at);
        if repo.find_reference(&name).is_err() {
            repo.reference(&name, commit, false, "grove: checkpoint stored")
                .map_err(failed("name the code of a checkpoint", path))?;
        }
    }
    delete(&repo, hold).map_err(failed("drop a recording ref", path))
}

/// The repositories whose code checkpoints of `session` recorded: where its
/// checkpoint refs may be.
pub fn session_repos(conn: &rusqlite::Connection, session: &str) -> rusqlite::Result<Vec<PathBuf>> {
    let mut stmt = conn.prepare(
        "SELECT DISTINCT json_extract(code, '$.repo') FROM checkpoints
         WHERE session = ?1 AND code IS NOT NULL",
    )?;
    let rows = stmt.query_map([session], |r| r.get::<_, Option<String>>(0))?;
    let mut repos = Vec::new();
    for repo in rows {
        repos.extend(repo?.map(PathBuf::from));
    }
    Ok(repos)
}

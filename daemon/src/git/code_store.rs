//! Where a jailed agent's checkpoints keep their code until its collect: a bare
//! repository of grove's in the agent's private state directory (`agents/<id>/code.git`)
//! that borrows the user's objects (alternates), so that what the user has is never
//! written twice and what is new stays out of the user's repository while the agent
//! runs. Not the agent's own repository: the agent can rewrite that one's directories,
//! and libgit2 follows links when it writes, so an `objects/ab` the agent turned into a
//! link would have the daemon write wherever it points. The jail never shows the state
//! directory, so nothing in the store is the agent's.
//!
//! The code comes into the user's repository by one hardened fetch (which hashes every
//! object it brings) under the rule of the agent's branch: a commit that would bring an
//! object over `salvage_max_file` stays out, and says so. The collect brings in every
//! checkpoint's (`bring_in`); the user's own `state.code` brings one in before then
//! (`bring_tree_in`).

use super::object_sizes::first_oversized_new;
use crate::error::Error;
use git2::{Oid, Repository};
use std::fs;
use std::path::{Path, PathBuf};

/// The store's directory name, in the agent's state directory.
pub const CODE_STORE: &str = "code.git";

/// Where a tree of the store waits to be fetched.
const IMPORT_REFS: &str = "refs/grove/import/";

/// The refs of the store that hold code: every checkpoint's, and a recording a crash
/// left (settled in the user's repository at the next start, as any other).
const HOLDING_REFS: [&str; 2] = [super::CHECKPOINT_REFS, super::RECORDING_REFS];

const CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tlogAllRefUpdates = false\n";

/// The code store of the agent whose state directory is `agent_dir`.
pub fn path(agent_dir: &Path) -> PathBuf {
    agent_dir.join(CODE_STORE)
}

/// Why checkpoints' code stayed out at collect, beside the store (which goes).
fn notes_path(store: &Path) -> PathBuf {
    store.with_extension("left-out")
}

/// The store at `path`, made on first use, borrowing the objects of the user's
/// repository whose git dir is `common`.
pub fn open(path: &Path, common: &Path) -> Result<Repository, Error> {
    let fail = |what: &str, e: std::io::Error| {
        Error::Git(format!(
            "cannot {what} the code store {}: {e}",
            path.display()
        ))
    };
    // HEAD is written last: a store a crash left half-made is made again.
    if !path.join("HEAD").is_file() {
        for sub in ["objects/info", "objects/pack", "refs/heads"] {
            fs::create_dir_all(path.join(sub)).map_err(|e| fail("make", e))?;
        }
        let mut alternates = common.join("objects").into_os_string();
        alternates.push("\n");
        fs::write(
            path.join("objects/info/alternates"),
            alternates.as_encoded_bytes(),
        )
        .map_err(|e| fail("write", e))?;
        fs::write(path.join("config"), CONFIG).map_err(|e| fail("write", e))?;
        fs::write(path.join("HEAD"), "ref: refs/heads/none\n").map_err(|e| fail("write", e))?;
    }
    Repository::open_bare(path).map_err(|e| {
        Error::Git(format!(
            "cannot open the code store {}: {}",
            path.display(),
            e.message()
        ))
    })
}

/// What a collect did with the store's code: what stayed out and why (the user is told).
#[derive(Debug, Default)]
pub struct BroughtIn {
    /// The refs brought in (a checkpoint deleted meanwhile has one too).
    pub brought: Vec<String>,
    pub left_out: Vec<String>,
}

/// Brings every checkpoint's code of the store at `store` into the user's repository
/// (git dir `common`) under the same ref names, then removes the store. A commit that
/// would bring an object over `max_file` stays out and is named; one the fetch refuses
/// too (the store is kept then, for the user's `state.code` to try again). In the lane.
pub fn bring_in(common: &Path, store: &Path, max_file: u64) -> Result<BroughtIn, Error> {
    let mut done = BroughtIn::default();
    if !store.join("HEAD").is_file() {
        return Ok(done);
    }
    let repo = open(store, common)?;
    let users = users_odb(common)?;
    let mut fetch = Vec::new();
    let mut notes = String::new();
    for (name, commit) in holding_refs(&repo) {
        match oversized(&repo, &users, commit, max_file)? {
            Some(object) => {
                let tree = tree_of(&repo, commit);
                notes.push_str(&format!(
                    "{tree} it holds an object over salvage_max_file ({max_file} bytes): \
                     {object}\n"
                ));
                done.left_out.push(format!(
                    "{name} holds an object over salvage_max_file ({max_file} bytes): {object}"
                ));
            }
            None => fetch.push(name),
        }
    }
    let mut kept = false;
    if !fetch.is_empty() && fetch_refs(common, store, &fetch).is_err() {
        // One by one, so that one the fetch refuses keeps none of the others out.
        for name in fetch {
            if let Err(e) = fetch_refs(common, store, std::slice::from_ref(&name)) {
                kept = true;
                done.left_out
                    .push(format!("{name} was not brought in: {e}"));
                continue;
            }
            done.brought.push(name);
        }
    } else {
        done.brought = fetch;
    }
    if !notes.is_empty() {
        fs::write(notes_path(store), notes).map_err(Error::io("write", &notes_path(store)))?;
    }
    drop(repo);
    if kept {
        done.left_out.push(format!(
            "the code store is kept at {} for `grove state code` to try again",
            store.display()
        ));
    } else {
        fs::remove_dir_all(store).map_err(Error::io("remove", store))?;
    }
    Ok(done)
}

/// Brings the commit of `tree` into the user's repository (git dir `common`) as
/// `dest`, from the store at `store`, unless it would bring an object over
/// `max_file`. In the lane.
pub fn bring_tree_in(
    common: &Path,
    store: &Path,
    tree: &str,
    dest: &str,
    max_file: u64,
) -> Result<(), Error> {
    let gone = || {
        let why = fs::read_to_string(notes_path(store))
            .ok()
            .and_then(|notes| {
                notes
                    .lines()
                    .find_map(|l| l.strip_prefix(tree).map(|why| why.trim().to_string()))
            });
        match why {
            Some(why) => Error::InvalidState(format!(
                "it was not brought into the repository when its agent was collected: {why}"
            )),
            None => Error::NotFound(
                "its agent's code store is gone and the repository does not have it".into(),
            ),
        }
    };
    let users = users_odb(common)?;
    // Its collect may have brought it in since the caller looked.
    if Oid::from_str(tree).is_ok_and(|t| users.exists(t)) {
        return Ok(());
    }
    if !store.join("HEAD").is_file() {
        return Err(gone());
    }
    let repo = open(store, common)?;
    let found = Oid::from_str(tree)
        .ok()
        .and_then(|t| repo.find_tree(t).ok())
        .ok_or_else(gone)?;
    let grove = super::authorship::Identity::grove();
    let commit = git2::Signature::now(&grove.name, &grove.email)
        .and_then(|sig| repo.commit(None, &sig, &sig, "grove: checkpoint code\n", &found, &[]))
        .map_err(|e| Error::Git(format!("cannot commit a recorded tree: {}", e.message())))?;
    if let Some(object) = oversized(&repo, &users, commit, max_file)? {
        return Err(Error::InvalidState(format!(
            "it would bring an object over salvage_max_file ({max_file} bytes) into the \
             repository: {object}"
        )));
    }
    let temp = format!("{IMPORT_REFS}{commit}");
    repo.reference(&temp, commit, true, "grove: to fetch")
        .map_err(|e| Error::Git(format!("cannot write {temp}: {}", e.message())))?;
    let fetched = fetch_as(common, store, &[(temp.clone(), dest.to_string())]);
    if let Ok(mut reference) = repo.find_reference(&temp) {
        let _ = reference.delete();
    }
    fetched
}

fn users_odb(common: &Path) -> Result<git2::Odb<'static>, Error> {
    let fail =
        |e: git2::Error| Error::Git(format!("cannot open {}: {}", common.display(), e.message()));
    let odb = git2::Odb::new().map_err(fail)?;
    odb.add_disk_alternate(&common.join("objects").to_string_lossy())
        .map_err(fail)?;
    Ok(odb)
}

fn oversized(
    repo: &Repository,
    users: &git2::Odb<'_>,
    commit: Oid,
    max_file: u64,
) -> Result<Option<String>, Error> {
    first_oversized_new(repo, users, commit, max_file).map_err(|e| {
        Error::Git(format!(
            "cannot size a checkpoint's objects: {}",
            e.message()
        ))
    })
}

fn tree_of(repo: &Repository, commit: Oid) -> String {
    repo.find_commit(commit)
        .map(|c| c.tree_id().to_string())
        .unwrap_or_default()
}

/// The store's refs that hold code, with their commits.
fn holding_refs(repo: &Repository) -> Vec<(String, Oid)> {
    let Ok(refs) = repo.references() else {
        return Vec::new();
    };
    refs.flatten()
        .filter_map(|r| Some((r.name()?.to_string(), r.target()?)))
        .filter(|(name, _)| HOLDING_REFS.iter().any(|p| name.starts_with(p)))
        .collect()
}

fn fetch_refs(common: &Path, store: &Path, names: &[String]) -> Result<(), Error> {
    let pairs: Vec<(String, String)> = names.iter().map(|n| (n.clone(), n.clone())).collect();
    fetch_as(common, store, &pairs)
}

/// One hardened fetch of `(store ref, user's ref)` pairs, forced: the destinations are
/// refs only grove writes.
fn fetch_as(common: &Path, store: &Path, pairs: &[(String, String)]) -> Result<(), Error> {
    let mut command = super::scratch::fetch_from(common, store);
    for (from, to) in pairs {
        command.arg(format!("+{from}:{to}"));
    }
    let output = command
        .output()
        .map_err(|e| Error::Git(format!("cannot run git fetch: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Git(format!(
            "git fetch of checkpoint code failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint's commit of one file in `store`, under `name`; its tree.
    fn checkpoint(store: &Repository, name: &str, file: &str, bytes: &[u8]) -> Oid {
        let blob = store.blob(bytes).expect("blob");
        let mut builder = store.treebuilder(None).expect("builder");
        builder.insert(file, blob, 0o100644).expect("insert");
        let tree = builder.write().expect("tree");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let found = store.find_tree(tree).expect("tree");
        let commit = store
            .commit(None, &sig, &sig, "c", &found, &[])
            .expect("commit");
        store.reference(name, commit, true, "t").expect("ref");
        tree
    }

    #[test]
    fn code_over_the_cap_stays_out_and_says_why_while_the_rest_comes_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let users = Repository::init_bare(dir.path().join("users.git")).expect("init");
        let path = dir.path().join("agent").join(CODE_STORE);
        let store = open(&path, users.path()).expect("store");
        let small = checkpoint(
            &store,
            "refs/grove/checkpoints/s/1",
            "small.txt",
            b"small\n",
        );
        let big = checkpoint(&store, "refs/grove/checkpoints/s/2", "big.bin", &[7u8; 300]);
        drop(store);
        assert!(!users.odb().expect("odb").exists(small));

        let done = bring_in(users.path(), &path, 200).expect("bring in");
        assert_eq!(done.brought, ["refs/grove/checkpoints/s/1"], "{done:?}");
        assert_eq!(done.left_out.len(), 1, "{done:?}");
        assert!(
            done.left_out[0].contains(
                "refs/grove/checkpoints/s/2 holds an object over salvage_max_file (200 bytes): \
                 big.bin, 300 bytes"
            ),
            "{done:?}"
        );
        let held = users
            .find_reference("refs/grove/checkpoints/s/1")
            .and_then(|r| r.peel_to_commit())
            .expect("the small checkpoint's ref");
        assert_eq!(held.tree_id(), small);
        assert!(users.find_reference("refs/grove/checkpoints/s/2").is_err());
        assert!(!users.odb().expect("odb").exists(big));
        assert!(!path.exists(), "the store stays after its collect");

        // Asked for afterwards, the one left out says why.
        let asked = bring_tree_in(users.path(), &path, &big.to_string(), "refs/x", 200)
            .expect_err("over the cap");
        assert!(
            asked
                .to_string()
                .contains("over salvage_max_file (200 bytes): big.bin, 300 bytes"),
            "{asked}"
        );
    }
}

//! What a jailed agent's branch would bring into the user's repository, judged from
//! object headers alone. Its commits are its own (files it committed itself never pass
//! the salvage's `salvage_max_file`), and a small object can inflate to gigabytes: one
//! that inflated to 1 GiB held the user's repository for 50 s. So before the fetch,
//! every commit from the tip back to the base, its root tree and each blob it adds or
//! changes is sized by its header, which is read without inflating the object.

use git2::{Delta, Diff, ObjectType, Odb, Oid, Repository};

/// The first object over `max` bytes on `tip`'s history back to `base`, named for the
/// user ("src/big.bin, 1073741824 bytes, in commit 1a2b3c4d5e6f").
pub fn first_oversized(
    repo: &Repository,
    tip: Oid,
    base: Oid,
    max: u64,
) -> Result<Option<String>, git2::Error> {
    let odb = repo.odb()?;
    let size = |oid: Oid| odb.read_header(oid).map(|(size, _)| size as u64);
    let mut walk = repo.revwalk()?;
    walk.push(tip)?;
    walk.hide(base)?;
    for commit_id in walk {
        let commit_id = commit_id?;
        let short = &commit_id.to_string()[..12];
        if size(commit_id)? > max {
            return Ok(Some(format!(
                "commit {short} itself, {} bytes",
                size(commit_id)?
            )));
        }
        let commit = repo.find_commit(commit_id)?;
        let tree_id = commit.tree_id();
        if size(tree_id)? > max {
            return Ok(Some(format!(
                "the tree of commit {short}, {} bytes",
                size(tree_id)?
            )));
        }
        let parent_tree = match commit.parent(0) {
            Ok(parent) => Some(parent.tree()?),
            Err(_) => None,
        };
        let tree = commit.tree()?;
        let diff: Diff<'_> = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?;
        for delta in diff.deltas() {
            if !matches!(
                delta.status(),
                Delta::Added | Delta::Modified | Delta::Copied | Delta::Renamed | Delta::Typechange
            ) {
                continue;
            }
            let file = delta.new_file();
            // A submodule's commit is not an object of this repository.
            if file.mode() == git2::FileMode::Commit {
                continue;
            }
            let bytes = size(file.id())?;
            if bytes > max {
                let path = file
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                return Ok(Some(format!("{path}, {bytes} bytes, in commit {short}")));
            }
        }
    }
    Ok(None)
}

/// The first object over `max` bytes that `commit` of `repo` would bring into a
/// repository whose objects are `known`: the commit, and every tree and blob under it
/// that `known` lacks (a tree `known` has brings nothing more). For a checkpoint's code,
/// which has no base of its own to diff against.
pub fn first_oversized_new(
    repo: &Repository,
    known: &Odb<'_>,
    commit: Oid,
    max: u64,
) -> Result<Option<String>, git2::Error> {
    let odb = repo.odb()?;
    let size = |oid: Oid| odb.read_header(oid).map(|(size, _)| size as u64);
    if known.exists(commit) {
        return Ok(None);
    }
    let short = &commit.to_string()[..12];
    let bytes = size(commit)?;
    if bytes > max {
        return Ok(Some(format!("commit {short} itself, {bytes} bytes")));
    }
    let mut trees = vec![(String::new(), repo.find_commit(commit)?.tree_id())];
    while let Some((dir, tree_id)) = trees.pop() {
        if known.exists(tree_id) {
            continue;
        }
        let bytes = size(tree_id)?;
        if bytes > max {
            let name = if dir.is_empty() { "/" } else { &dir };
            return Ok(Some(format!("the tree {name}, {bytes} bytes")));
        }
        for entry in repo.find_tree(tree_id)?.iter() {
            let path = format!("{dir}{}", String::from_utf8_lossy(entry.name_bytes()));
            match entry.kind() {
                Some(ObjectType::Tree) => trees.push((format!("{path}/"), entry.id())),
                Some(ObjectType::Blob) if !known.exists(entry.id()) => {
                    let bytes = size(entry.id())?;
                    if bytes > max {
                        return Ok(Some(format!("{path}, {bytes} bytes")));
                    }
                }
                // A submodule's commit is not an object of this repository.
                _ => {}
            }
        }
    }
    Ok(None)
}

/// [`first_oversized_new`] over `tip` and every ancestor `known` lacks: all that a
/// fetch of `tip` would bring.
pub fn first_oversized_history(
    repo: &Repository,
    known: &Odb<'_>,
    tip: Oid,
    max: u64,
) -> Result<Option<String>, git2::Error> {
    let mut seen = std::collections::HashSet::new();
    let mut commits = vec![tip];
    while let Some(commit) = commits.pop() {
        if known.exists(commit) || !seen.insert(commit) {
            continue;
        }
        if let Some(found) = first_oversized_new(repo, known, commit, max)? {
            let short = &commit.to_string()[..12];
            return Ok(Some(format!("{found}, in commit {short}")));
        }
        commits.extend(repo.find_commit(commit)?.parent_ids());
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_file(repo: &Repository, parent: Option<Oid>, name: &str, bytes: &[u8]) -> Oid {
        let blob = repo.blob(bytes).expect("blob");
        let mut builder = repo.treebuilder(None).expect("treebuilder");
        builder.insert(name, blob, 0o100644).expect("insert");
        let tree = repo
            .find_tree(builder.write().expect("tree"))
            .expect("find tree");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let parents: Vec<_> = parent
            .map(|p| repo.find_commit(p).expect("parent"))
            .into_iter()
            .collect();
        let parents: Vec<_> = parents.iter().collect();
        repo.commit(None, &sig, &sig, name, &tree, &parents)
            .expect("commit")
    }

    #[test]
    fn a_blob_over_the_cap_is_named_with_its_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let base = commit_file(&repo, None, "a.txt", b"small");
        let ok = commit_file(&repo, Some(base), "b.txt", &[b'x'; 100]);
        assert_eq!(first_oversized(&repo, ok, base, 200).expect("walk"), None);
        // Zeros compress to almost nothing: the header still says how big it is.
        let big = commit_file(&repo, Some(ok), "big.bin", &vec![0u8; 1 << 20]);
        let found = first_oversized(&repo, big, base, 200)
            .expect("walk")
            .expect("found");
        assert!(
            found.starts_with("big.bin, 1048576 bytes, in commit"),
            "{found}"
        );
        // What the base already had is not the agent's.
        assert_eq!(first_oversized(&repo, big, big, 200).expect("walk"), None);
    }

    #[test]
    fn only_what_the_other_repository_lacks_is_sized() {
        let dir = tempfile::tempdir().expect("tempdir");
        let users = Repository::init(dir.path().join("users")).expect("init");
        let base = commit_file(&users, None, "big.bin", &vec![0u8; 1 << 20]);
        let store = Repository::init_bare(dir.path().join("store")).expect("init");
        let alternates = users.path().join("objects").display().to_string();
        std::fs::write(store.path().join("objects/info/alternates"), alternates).expect("alt");
        let store = Repository::open_bare(dir.path().join("store")).expect("open");
        let known = users.odb().expect("odb");
        // The user's big file is the user's: only the new blob counts.
        let ok = commit_file(&store, Some(base), "big.bin", &vec![0u8; 1 << 20]);
        assert_eq!(
            first_oversized_new(&store, &known, ok, 200).expect("walk"),
            None
        );
        let new = commit_file(&store, None, "new.bin", &vec![1u8; 300]);
        let found = first_oversized_new(&store, &known, new, 200).expect("walk");
        assert_eq!(found.as_deref(), Some("new.bin, 300 bytes"));
        // An ancestor the other repository lacks counts as much as the tip.
        let tip = commit_file(&store, Some(new), "small.txt", b"small");
        assert_eq!(
            first_oversized_new(&store, &known, tip, 200).expect("walk"),
            None
        );
        let found = first_oversized_history(&store, &known, tip, 200)
            .expect("walk")
            .expect("found");
        assert!(
            found.starts_with("new.bin, 300 bytes, in commit"),
            "{found}"
        );
        assert_eq!(
            first_oversized_history(&store, &known, ok, 200).expect("walk"),
            None
        );
    }
}

//! What a jailed agent's branch would bring into the user's repository, judged from
//! object headers alone. Its commits are its own (files it committed itself never pass
//! the salvage's `salvage_max_file`), and a small object can inflate to gigabytes: one
//! that inflated to 1 GiB held the user's repository for 50 s. So before the fetch,
//! every commit from the tip back to the base, its root tree and each blob it adds or
//! changes is sized by its header, which is read without inflating the object.

use git2::{Delta, Diff, Oid, Repository};

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
}

//! Whose content a commit is. Setup commands run on a new worktree as its agent will,
//! which for an unjailed agent is as the user: they must never run what only an agent
//! wrote (a jailed agent's `package.json` with a `preinstall`, its `setup.sh`). A
//! commit is the user's own when a ref the user keeps reaches it: any ref but grove's
//! for agents (`refs/heads/grove/*`, their branches; `refs/grove/*`, checkpoints and
//! salvage). An agent's branch becomes the user's by being merged into one of theirs.

use crate::error::Error;
use git2::{Oid, Repository};
use std::path::Path;

/// Ref prefixes that hold agents' work, never the user's own.
const AGENTS_REFS: &[&str] = &["refs/heads/grove/", "refs/grove/"];

/// Whether a ref of the user's in `repo` is at or descends from `commit`.
pub fn is_users_own(repo: &Path, commit: &str) -> Result<bool, Error> {
    let failed = |what: &str, e: git2::Error| {
        Error::Git(format!(
            "cannot tell whose {commit} is in {}: {what}: {}",
            repo.display(),
            e.message()
        ))
    };
    let repository = Repository::open(repo).map_err(|e| failed("open", e))?;
    let wanted = Oid::from_str(commit).map_err(|e| failed("a commit id", e))?;
    let mut tips = Vec::new();
    // A detached HEAD is the user's checkout; an attached one is one of the refs below
    // (and counts only if that ref does).
    if repository.head_detached().unwrap_or(false) {
        if let Ok(head) = repository.head().and_then(|h| h.peel_to_commit()) {
            tips.push(head.id());
        }
    }
    for reference in repository
        .references()
        .map_err(|e| failed("list refs", e))?
        .flatten()
    {
        let name = reference.name().unwrap_or_default();
        if AGENTS_REFS.iter().any(|prefix| name.starts_with(prefix)) {
            continue;
        }
        if let Ok(tip) = reference.peel_to_commit() {
            tips.push(tip.id());
        }
    }
    // Equality first: the usual base is the tip of the user's branch.
    if tips.contains(&wanted) {
        return Ok(true);
    }
    for tip in tips {
        if repository
            .graph_descendant_of(tip, wanted)
            .map_err(|e| failed("walk history", e))?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn only_refs_outside_groves_make_a_commit_the_users() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path();
        git(repo, &["init", "-q", "-b", "main"]);
        git(repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let first = git(repo, &["rev-parse", "HEAD"]);
        git(repo, &["checkout", "-q", "-b", "grove/ab12"]);
        git(repo, &["commit", "-q", "--allow-empty", "-m", "agent"]);
        let agents = git(repo, &["rev-parse", "HEAD"]);
        git(repo, &["update-ref", "refs/grove/checkpoints/x", &agents]);
        git(repo, &["checkout", "-q", "main"]);
        assert!(is_users_own(repo, &first).expect("first"));
        assert!(!is_users_own(repo, &agents).expect("agent's"));
        // Merged into a branch of the user's, it is theirs.
        git(repo, &["merge", "-q", "--ff-only", "grove/ab12"]);
        assert!(is_users_own(repo, &agents).expect("merged"));
    }
}

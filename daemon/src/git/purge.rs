//! `session rm --purge` in one repository: the agents' branches, the session's
//! checkpoint refs and, when asked, the agents' salvage refs. Only libgit2 reads and
//! deletes refs here, so no hook or filter of the repository runs.

use super::lane::RepoLane;
use crate::error::Error;
use grove_proto::state::{DeletedRef, Purged};

/// What goes from one repository.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `refs/grove/checkpoints/<session>/`, and each agent's recording refs
    /// (`refs/grove/recording/<agent>/`).
    pub code_prefixes: Vec<String>,
    /// The agents of the session in this repository: id and branch (empty: none).
    pub agents: Vec<(String, String)>,
    pub salvage_too: bool,
}

/// Refuses, before anything goes, a branch some worktree has checked out: git would
/// be left with a HEAD naming a branch that no longer exists.
pub fn check(lane: &RepoLane, plan: &Plan) -> Result<(), Error> {
    for (id, branch) in plan.agents.iter().filter(|(_, b)| !b.is_empty()) {
        let full = format!("refs/heads/{branch}");
        if let Some(at) = super::refs::checked_out_at(lane, &full) {
            return Err(Error::InvalidState(format!(
                "{branch} (agent {id}) is checked out in {}; switch that worktree to \
                 another branch first; nothing was deleted",
                at.display()
            )));
        }
    }
    Ok(())
}

/// Deletes what `plan` names that exists; says exactly what went, with the commit each
/// ref named.
pub fn delete(lane: &RepoLane, plan: &Plan) -> Result<Purged, Error> {
    let mut purged = Purged::default();
    for (_, branch) in plan.agents.iter().filter(|(_, b)| !b.is_empty()) {
        if let Some(gone) = delete_ref(lane, &format!("refs/heads/{branch}"))? {
            purged.branches.push(DeletedRef {
                name: branch.clone(),
                ..gone
            });
        }
    }
    for prefix in &plan.code_prefixes {
        for name in names_under(lane, prefix)? {
            purged.checkpoint_refs.extend(delete_ref(lane, &name)?);
        }
    }
    if plan.salvage_too {
        for (id, _) in &plan.agents {
            for name in [
                format!("{}{id}", super::refs::SALVAGE_PREFIX),
                grove_proto::git::discarded_ref(id),
            ] {
                purged.salvage_refs.extend(delete_ref(lane, &name)?);
            }
        }
    }
    Ok(purged)
}

/// The refs whose names start with `prefix` (compared as text: a session's name may
/// hold characters a glob would read).
fn names_under(lane: &RepoLane, prefix: &str) -> Result<Vec<String>, Error> {
    let failed = |source| Error::PurgeRef {
        what: "list",
        name: prefix.to_string(),
        repo: lane.target.workdir.clone(),
        source,
    };
    let refs = lane.repo.references().map_err(failed)?;
    let mut names = Vec::new();
    for reference in refs {
        let reference = reference.map_err(failed)?;
        if let Some(name) = reference.name().filter(|n| n.starts_with(prefix)) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// Deletes ref `name` if it exists; what it named.
fn delete_ref(lane: &RepoLane, name: &str) -> Result<Option<DeletedRef>, Error> {
    let failed = |what| {
        move |source| Error::PurgeRef {
            what,
            name: name.to_string(),
            repo: lane.target.workdir.clone(),
            source,
        }
    };
    let mut reference = match lane.repo.find_reference(name) {
        Ok(r) => r,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(failed("read")(e)),
    };
    let commit = reference
        .target()
        .map(|oid| oid.to_string())
        .unwrap_or_default();
    reference.delete().map_err(failed("delete"))?;
    tracing::info!(repo = %lane.target.workdir.display(), name, commit, "purge: deleted a ref");
    Ok(Some(DeletedRef {
        repo: lane.target.workdir.clone(),
        name: name.to_string(),
        commit,
    }))
}

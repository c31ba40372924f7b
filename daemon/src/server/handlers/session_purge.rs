//! `session.rm` with `purge`: the session and everything of its agents. Refused while
//! any of them is live or has a worktree left, with nothing changed. Then, in order:
//! the refs in each repository's lane (every branch checked first, so that a checked
//! out one stops the purge before anything goes), the agents' records, their
//! directories (logs), and last the session with its audit row, which says what went.

use super::super::Ctx;
use crate::error::Error;
use crate::git::purge::{self, Plan};
use crate::git::target::{resolve_repo, RepoTarget};
use crate::sessions::code::CHECKPOINT_REFS;
use crate::sessions::code_ref::RECORDING_REFS;
use grove_proto::methods::SessionRmParams;
use grove_proto::state::{Purged, SessionRemoval};
use grove_proto::types::AgentRecord;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub async fn handle(ctx: &Ctx, params: SessionRmParams) -> Result<SessionRemoval, Error> {
    let name = params.name.clone();
    if let Err(Error::NotFound(why)) = ctx.state.info(&name).await {
        return Err(Error::NotFound(format!("{why}; nothing was deleted")));
    }
    let agents: Vec<AgentRecord> = ctx
        .core
        .snapshot()
        .await?
        .into_iter()
        .filter(|a| a.session == name)
        .collect();
    may_purge(&name, &agents)?;
    let plans = plans(ctx, &name, &agents, params.salvage_too).await?;
    for (target, plan) in &plans {
        let plan = plan.clone();
        ctx.lanes
            .run(target, move |lane| purge::check(lane, &plan))
            .await?;
    }
    let mut purged = Purged::default();
    for (target, plan) in plans {
        let went = ctx
            .lanes
            .run(&target, move |lane| purge::delete(lane, &plan))
            .await?;
        purged.branches.extend(went.branches);
        purged.checkpoint_refs.extend(went.checkpoint_refs);
        purged.salvage_refs.extend(went.salvage_refs);
    }
    let ids = agents.iter().map(|a| a.id.clone()).collect();
    purged.agents = ctx.core.forget_records(ids).await?;
    remove_agent_dirs(ctx, &purged.agents).await;
    let reason = params.reason.unwrap_or_else(|| "purge".into());
    ctx.state.remove_purged(&name, &reason, purged).await
}

/// A live agent would go on writing what goes; a kept worktree holds work no ref has.
fn may_purge(name: &str, agents: &[AgentRecord]) -> Result<(), Error> {
    let live: Vec<&str> = agents
        .iter()
        .filter(|a| !a.status.is_final())
        .map(|a| a.id.as_str())
        .collect();
    if !live.is_empty() {
        return Err(Error::Refused(format!(
            "session `{name}` has live agents ({}); nothing was deleted: stop them first \
             (`grove kill ID`), then purge again",
            live.join(", ")
        )));
    }
    let kept: Vec<&str> = agents
        .iter()
        .filter(|a| a.worktree.exists())
        .map(|a| a.id.as_str())
        .collect();
    if !kept.is_empty() {
        return Err(Error::Refused(format!(
            "agents of session `{name}` still have worktrees ({}); nothing was deleted: \
             remove them first (`grove rm ID`), then purge again",
            kept.join(", ")
        )));
    }
    Ok(())
}

/// Per repository the agents worked in or the checkpoints recorded code of, what goes
/// from it. A repository that no longer exists took its refs with it.
async fn plans(
    ctx: &Ctx,
    name: &str,
    agents: &[AgentRecord],
    salvage_too: bool,
) -> Result<Vec<(RepoTarget, Plan)>, Error> {
    let session = name.to_string();
    let mut repos: Vec<PathBuf> = ctx
        .db
        .call(move |conn| crate::sessions::code_ref::session_repos(conn, &session))
        .await?;
    repos.extend(agents.iter().map(|a| a.repo.clone()));
    let mut by_lane: BTreeMap<PathBuf, (RepoTarget, Plan)> = BTreeMap::new();
    for repo in repos {
        let Some(target) = target_of(repo.clone()).await? else {
            continue;
        };
        let entry = by_lane.entry(target.common_dir.clone()).or_insert_with(|| {
            let plan = Plan {
                code_prefixes: vec![format!("{CHECKPOINT_REFS}{name}/")],
                agents: Vec::new(),
                salvage_too,
            };
            (target, plan)
        });
        for agent in agents.iter().filter(|a| a.repo == repo) {
            if entry.1.agents.iter().any(|(id, _)| *id == agent.id) {
                continue;
            }
            let branch = if agent.branch_exists {
                agent.branch.clone()
            } else {
                String::new()
            };
            entry.1.agents.push((agent.id.clone(), branch));
            let recording = format!("{RECORDING_REFS}{}/", agent.id);
            entry.1.code_prefixes.push(recording);
        }
    }
    Ok(by_lane.into_values().collect())
}

async fn target_of(repo: PathBuf) -> Result<Option<RepoTarget>, Error> {
    if !repo.exists() {
        return Ok(None);
    }
    tokio::task::spawn_blocking(move || resolve_repo(&repo).map(Some)).await?
}

/// The agents' own directories: their logs, screens and inputs.
async fn remove_agent_dirs(ctx: &Ctx, ids: &[String]) {
    let dirs: Vec<PathBuf> = ids.iter().map(|id| ctx.config.dirs.agent_dir(id)).collect();
    let removing = tokio::task::spawn_blocking(move || {
        for dir in dirs {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %dir.display(), error = %e, "purge: cannot remove an agent's directory")
                }
            }
        }
    });
    if let Err(e) = removing.await {
        tracing::error!(error = %e, "purge: removing agents' directories failed");
    }
}

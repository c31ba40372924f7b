//! `repo.lease`: the repository's lane, held for a client (`grove merge`, which runs git
//! in the user's own process) until its connection closes. Meanwhile grove makes no
//! change of its own to that repository: no warm-pool worktree, no agent checkout, no
//! collect; they wait in the lane.

use super::super::connection::Conn;
use super::super::Ctx;
use super::{Answer, Json};
use crate::Error;
use grove_proto::methods::{LeaseParams, LeaseResult};
use serde_json::Value;
use tokio::sync::oneshot;

/// Answers once the lane is held, then holds it until the client leaves: the
/// connection aborts this request then, which drops `release` and frees the lane.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    params: LeaseParams,
) -> Option<Answer> {
    let (release, released) = oneshot::channel::<()>();
    match take(ctx, params, released).await {
        Ok(lease) => {
            conn.respond(id, Json::of(&lease)).await;
            std::future::pending::<()>().await;
            drop(release);
            None
        }
        Err(e) => Some(Err(e.into())),
    }
}

async fn take(
    ctx: &Ctx,
    params: LeaseParams,
    released: oneshot::Receiver<()>,
) -> Result<LeaseResult, Error> {
    let target = super::client_repo(&params.repo).await?;
    let temp_dir = ctx.config.dirs.worktree_root.join(&target.dir_name);
    // Before the lane is held (the janitor removes them in it): what a killed merge
    // left would otherwise hold its branch checked out for the next merge to pick.
    let dead = dead_merges(&temp_dir);
    if !dead.is_empty() {
        ctx.janitor
            .reap(dead, "a killed `grove merge` left it behind")
            .await;
    }
    let (held_tx, held) = oneshot::channel::<()>();
    // Queued at once; the lane thread blocks in it until `released` resolves. The
    // thread is a plain one (not the runtime's), where blocking is its job.
    let holding = ctx.lanes.get(&target).await?.submit(move |_lane| {
        let _ = held_tx.send(());
        let _ = released.blocking_recv();
    });
    drop(holding);
    held.await
        .map_err(|_| crate::owner::OwnerGone("grove-repo-lane"))?;
    tracing::info!(repo = %target.workdir.display(), "repository leased");
    Ok(LeaseResult {
        repo: target.workdir,
        temp_dir,
    })
}

/// Temporary worktrees (`merge-<pid>-...`) whose merge process is gone. A pid that was
/// reused keeps its worktree until the next daemon's start-up scan.
fn dead_merges(temp_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(temp_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("merge-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<i32>().ok());
            pid.is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    == Err(nix::errno::Errno::ESRCH)
            })
        })
        .map(|entry| entry.path())
        .collect()
}

//! Case 2: spawn → agent running when a warm-pool worktree is ready, on both repos;
//! absolute, and as a ratio to case 1's unpooled spawn of the same run.

use super::{spawn, Ctx};
use crate::grove::poll_until;
use crate::report::{Goal, Metric, Row};
use crate::repos::Repo;
use crate::stats::{ms, Summary};
use anyhow::{Context, Result};
use std::time::Duration;

pub(super) const POOL_SIZE: u32 = 2;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    ctx.env.set_pool_size(POOL_SIZE)?;
    let mut rows = Vec::new();
    for (big, repo) in [(false, ctx.repos.small()), (true, ctx.repos.big())] {
        let row = repo.and_then(|repo| measure(ctx, repo, big));
        rows.push(row.unwrap_or_else(|e| {
            Row::not_available(
                "2",
                "pooled spawn → first log line",
                format!("error: {e:#}"),
            )
        }));
    }
    ctx.env.set_pool_size(0)?;
    Ok(rows)
}

fn measure(ctx: &Ctx<'_>, repo: &Repo, big: bool) -> Result<Row> {
    let mut pooled = Vec::new();
    // The first spawn in a repository is what starts its pool: it is the warm-up.
    for run in 0..=ctx.runs {
        if run > 0 {
            wait_for_warm_pool(ctx, repo)?;
        }
        let took = spawn::grove_once(ctx, repo)?;
        if run > 0 {
            pooled.push(ms(took));
        }
    }
    let unpooled = ctx.unpooled.borrow()[usize::from(big)];
    let baseline = if unpooled.is_some() {
        "unpooled spawn (case 1)"
    } else {
        "unpooled spawn (run case 1 too)"
    };
    Ok(Row::new(
        "2",
        format!("pooled spawn → first log line, {}", repo.label()),
        "ms",
    )
    .grove(Summary::of(&pooled))
    .baseline(baseline, unpooled)
    .goal(Goal::at_most(Metric::Median, 50.0))
    .note(format!(
        "GROVE_POOL_SIZE={POOL_SIZE}; each measured spawn starts once the pool of its \
         repository is ready"
    )))
}

/// Waits until the daemon reports a full, ready pool for `repo` (the bench may poll).
pub(super) fn wait_for_warm_pool(ctx: &Ctx<'_>, repo: &Repo) -> Result<()> {
    let workdir = repo.path.canonicalize().context("canonical repo path")?;
    poll_until(
        "a warm pool",
        Duration::from_secs(600),
        Duration::from_millis(20),
        || {
            let status = ctx.env.grove_json(&ctx.env.root, &["daemon", "status"])?;
            let ready = status["pool"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["ready"] == true)
                .filter(|p| {
                    p["repo"]
                        .as_str()
                        .is_some_and(|r| workdir.as_path() == std::path::Path::new(r))
                })
                .count();
            Ok(ready >= POOL_SIZE as usize)
        },
    )
    .map(drop)
}

//! Case 1: from starting `grove spawn` until the agent's first line is in its log,
//! against `git worktree add -b` of the same repository in the same run.

use super::{baseline_worktree, Ctx};
use crate::grove::{field, poll_until, timed};
use crate::report::{Goal, Metric, Row};
use crate::repos::Repo;
use crate::stats::{ms, Summary};
use anyhow::Result;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (big, repo) in [(false, ctx.repos.small()), (true, ctx.repos.big())] {
        let row = repo.and_then(|repo| measure(ctx, repo, big));
        rows.push(row.unwrap_or_else(|e| {
            Row::not_available("1", "spawn → first log line", format!("error: {e:#}"))
        }));
    }
    Ok(rows)
}

fn measure(ctx: &Ctx<'_>, repo: &Repo, big: bool) -> Result<Row> {
    let (mut grove, mut git) = (Vec::new(), Vec::new());
    for run in 0..=ctx.runs {
        // Alternate which goes first, so that neither always finds the cache warmer.
        let (g, b) = if run % 2 == 0 {
            (grove_once(ctx, repo)?, git_once(ctx, repo, run)?)
        } else {
            let b = git_once(ctx, repo, run)?;
            (grove_once(ctx, repo)?, b)
        };
        if run > 0 {
            grove.push(ms(g));
            git.push(ms(b));
        }
    }
    ctx.unpooled.borrow_mut()[usize::from(big)] = Summary::of(&grove);
    let mut row = Row::new(
        "1",
        format!("spawn → first log line, {}", repo.label()),
        "ms",
    )
    .grove(Summary::of(&grove))
    .baseline("git worktree add -b", Summary::of(&git))
    .note(
        "grove runs `git -c checkout.workers=<cores> worktree add --lock`; \
         the baseline is git's default, one checkout worker",
    );
    if big {
        row = row.goal(Goal::at_most(Metric::Ratio, 0.8));
    }
    Ok(row)
}

pub fn grove_once(ctx: &Ctx<'_>, repo: &Repo) -> Result<Duration> {
    grove_once_with(ctx, repo, &[])
}

/// One spawn with `flags` (`--jail`), timed to the agent's first log line.
pub fn grove_once_with(ctx: &Ctx<'_>, repo: &Repo, flags: &[&str]) -> Result<Duration> {
    let env = ctx.env;
    let start = Instant::now();
    let record = env.spawn_with(&repo.path, flags, &["sh", "-c", "echo started; sleep 30"])?;
    let log = PathBuf::from(field(&record, "log_path")?);
    let seen = poll_until(
        "the agent's first log line",
        Duration::from_secs(600),
        Duration::from_micros(250),
        || Ok(std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)),
    )?;
    let took = seen - start;
    // `grove kill` returns once the agent is collected and its worktree gone.
    env.grove(&env.root, &["kill", field(&record, "id")?])?;
    Ok(took)
}

fn git_once(ctx: &Ctx<'_>, repo: &Repo, run: usize) -> Result<Duration> {
    let env = ctx.env;
    let (path, branch) = baseline_worktree(ctx, "spawn", repo, run);
    let took = timed(
        env.git_command(&repo.path)
            .args(["worktree", "add", "-b", &branch])
            .arg(&path),
    )?;
    env.git(
        &repo.path,
        &["worktree", "remove", "--force", &path.to_string_lossy()],
    )?;
    env.git(&repo.path, &["branch", "-D", &branch])?;
    Ok(took)
}

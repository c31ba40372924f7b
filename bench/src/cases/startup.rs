//! Case 7: daemon start-up with 20 worktrees (20 running agents to adopt) and many
//! agent records: from starting `grove daemon run` until it prints that it is ready.

use super::{make_records, spawn_sleepers, Ctx};
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::Result;
use std::time::Duration;

const WORKTREES: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let (target, budget) = if ctx.quick {
        (2_000, Duration::from_secs(45))
    } else {
        (10_000, Duration::from_secs(240))
    };
    let records = make_records(ctx, target, budget)?;
    let repo = ctx.repos.small()?;
    spawn_sleepers(env, &repo.path, WORKTREES)?;
    let records = records + WORKTREES;
    // With this many records, can the list still be had?
    let list_all = match env.grove_json(&env.root, &["list", "--all"]) {
        Ok(list) => format!(
            "grove list --all shows {} records",
            list["agents"].as_array().map_or(0, Vec::len)
        ),
        Err(e) => format!("grove list --all fails: {}", first_line(&format!("{e:#}"))),
    };

    let mut times = Vec::new();
    let result = (0..=ctx.runs).try_for_each(|run| {
        let took = start_once(ctx)?;
        if run > 0 {
            times.push(ms(took));
        }
        Ok::<_, anyhow::Error>(())
    });
    // Whatever happened, the agents must not outlive the benchmark.
    env.kill_live_agents()?;
    result?;
    let mut note = list_all;
    if records < target + WORKTREES {
        note = format!(
            "only {records} records fit the {}s budget for making them; {note}",
            budget.as_secs()
        );
    }
    Ok(vec![Row::new(
        "7",
        format!("daemon start → ready, {WORKTREES} worktrees, {records} records"),
        "ms",
    )
    .grove(Summary::of(&times))
    .goal(Goal::at_most(Metric::Median, 200.0))
    .note(note)])
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// Stops the running daemon, starts `grove daemon run` in the foreground and times it
/// until its ready line; then stops it again.
fn start_once(ctx: &Ctx<'_>) -> Result<Duration> {
    let env = ctx.env;
    let (mut child, _, took) = env.start_daemon_until_ready()?;
    // Let it answer once (its start-up scan done), then stop it and reap it.
    env.grove(&env.root, &["list"])?;
    env.stop_daemon()?;
    child.wait()?;
    Ok(took)
}

//! Case 12: cleanup off the critical path (issue 29). 20 agents on the big repository
//! end at once: how long from their exits until all are collected (each collect removes
//! a whole checkout), on a quiet machine and with both cores kept busy by another
//! process, against `git worktree remove --force` of as many checkouts one after
//! another. And `grove daemon stop` with a warm pool and 20 kept worktrees, against one
//! `git worktree remove --force`.

use super::{add_baseline, baseline_worktree, timed_removal, Ctx};
use crate::grove::{field, poll_until, timed};
use crate::report::{Goal, Metric, Row};
use crate::repos::Repo;
use crate::stats::{ms, Summary};
use anyhow::{bail, Result};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const AGENTS: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let repo = ctx.repos.big()?;
    // Each run checks out the big repository 20 times: two runs are plenty.
    let runs = ctx.runs.clamp(1, 2);
    let mut rows = Vec::new();
    for busy in [false, true] {
        rows.push(collects(ctx, repo, runs, busy)?);
    }
    let stopped = stop(ctx, repo)
        .unwrap_or_else(|e| Row::not_available("12", "grove daemon stop", format!("error: {e:#}")));
    rows.push(stopped);
    ctx.env.set_pool_size(0)?;
    ctx.env.set_max_worktrees(None)?;
    Ok(rows)
}

fn collects(ctx: &Ctx<'_>, repo: &Repo, runs: usize, busy: bool) -> Result<Row> {
    let (mut grove, mut git) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let _load = busy.then(BusyCores::start).transpose()?;
        grove.push(ms(all_collected(ctx, repo, run, busy)?) / 1000.0);
        git.push(ms(removes(ctx, repo, run, busy)?) / 1000.0);
    }
    let what = format!(
        "{AGENTS} agents ending at once, {}: exits → all collected{}",
        repo.label(),
        if busy { ", both cores busy" } else { "" }
    );
    Ok(Row::new("12", what, "s")
        .grove(Summary::of(&grove))
        .baseline(
            format!("{AGENTS} × git worktree remove --force"),
            Summary::of(&git),
        )
        .goal(Goal::at_most(Metric::Median, 10.0)))
}

/// Spawns 20 agents that change a file and wait for one gate, opens it, and times
/// until `grove wait` returns them all collected.
fn all_collected(ctx: &Ctx<'_>, repo: &Repo, run: usize, busy: bool) -> Result<Duration> {
    let env = ctx.env;
    let gate = env.root.join(format!("case12-gate-{run}-{busy}"));
    let script = format!(
        "echo changed >> '{}' && while [ ! -e '{}' ]; do sleep 0.01; done",
        repo.sample_file,
        gate.display()
    );
    let mut ids = Vec::with_capacity(AGENTS);
    for _ in 0..AGENTS {
        let record = env.spawn(&repo.path, &["sh", "-c", &script])?;
        ids.push(field(&record, "id")?.to_string());
    }
    poll_until(
        "the agents to run",
        Duration::from_secs(600),
        Duration::from_millis(50),
        || {
            let list = env.grove_json(&env.root, &["list"])?;
            let running = list["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["status"] == "running" && ids.iter().any(|id| a["id"] == id.as_str()))
                .count();
            Ok(running == AGENTS)
        },
    )?;
    std::fs::write(&gate, b"")?;
    let start = Instant::now();
    let out = env
        .grove_command(&env.root)
        .arg("wait")
        .args(&ids)
        .output()?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "the agents did not all succeed: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(took)
}

/// `git worktree remove --force` of 20 checkouts of `repo`, one after another.
fn removes(ctx: &Ctx<'_>, repo: &Repo, run: usize, busy: bool) -> Result<Duration> {
    let env = ctx.env;
    let mut made = Vec::with_capacity(AGENTS);
    for n in 0..AGENTS {
        let (path, branch) =
            baseline_worktree(ctx, &format!("cleanup{}-{n}", u8::from(busy)), repo, run);
        add_baseline(env, repo, &path, &branch)?;
        made.push((path, branch));
    }
    let mut took = Duration::ZERO;
    for (path, branch) in made {
        took += timed_removal(env, repo, &path, &branch)?;
    }
    Ok(took)
}

/// `grove daemon stop` with a warm pool of the big repository and 20 kept worktrees.
fn stop(ctx: &Ctx<'_>, repo: &Repo) -> Result<Row> {
    let env = ctx.env;
    // Room for the kept worktrees and the pool beside them (pool worktrees take slots).
    env.set_pool_size(super::pool::POOL_SIZE)?;
    env.set_max_worktrees(Some(AGENTS as u32 + super::pool::POOL_SIZE))?;
    let mut ids = Vec::with_capacity(AGENTS);
    for _ in 0..AGENTS {
        let record = env.spawn_with(&repo.path, &["--keep"], &["true"])?;
        ids.push(field(&record, "id")?.to_string());
    }
    env.grove_command(&env.root)
        .arg("wait")
        .args(&ids)
        .output()?;
    super::pool::wait_for_warm_pool(ctx, repo)?;
    let took = timed(env.grove_command(&env.root).args(["daemon", "stop"]))?;
    let (path, branch) = baseline_worktree(ctx, "cleanup-stop", repo, 0);
    add_baseline(env, repo, &path, &branch)?;
    let git = timed_removal(env, repo, &path, &branch)?;
    for id in &ids {
        let _ = env.grove(&env.root, &["rm", id]);
    }
    Ok(Row::new(
        "12",
        format!(
            "grove daemon stop, warm pool and {AGENTS} kept worktrees, {}",
            repo.label()
        ),
        "ms",
    )
    .grove(Summary::of(&[ms(took)]))
    .baseline("git worktree remove --force (one)", Summary::of(&[ms(git)]))
    .goal(Goal::at_most(Metric::Median, 2000.0)))
}

/// Another process keeping every core busy for as long as this lives.
struct BusyCores(Vec<Child>);

impl BusyCores {
    fn start() -> Result<BusyCores> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spinners = (0..cores)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(BusyCores(spinners))
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        for spinner in &mut self.0 {
            let _ = spinner.kill();
            let _ = spinner.wait();
        }
    }
}

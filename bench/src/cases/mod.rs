//! The cases, one file each. A case returns its rows; an error becomes a row that says
//! so, and the other cases still run.

mod cleanup;
mod collect;
mod cow;
mod history;
mod jail;
mod list;
mod memory;
mod merge;
mod overlaps;
mod pool;
mod queue;
mod spawn;
mod startup;
mod state;
mod terminal;

use crate::grove::Env;
use crate::report::Row;
use crate::repos::{Repo, Repos};
use anyhow::{Context, Result};
use serde_json::json;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const ALL: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

pub struct Ctx<'a> {
    pub env: &'a Env,
    pub repos: &'a Repos<'a>,
    /// Measured runs per case, after one warm-up.
    pub runs: usize,
    pub quick: bool,
    /// Case 1's unpooled spawn figures (small repo, big repo), for case 2's ratio.
    pub unpooled: std::cell::RefCell<[Option<crate::stats::Summary>; 2]>,
}

/// Where run `run` of a case's `git worktree add` baseline (named `case`) puts its
/// worktree, and the branch it makes for it.
fn baseline_worktree(ctx: &Ctx<'_>, case: &str, repo: &Repo, run: usize) -> (PathBuf, String) {
    let path = ctx
        .env
        .root
        .join("wt")
        .join(format!("{case}-{}-{run}", repo.spec.name));
    (path, format!("bench/{case}-{run}"))
}

/// A baseline worktree of `repo`: `git worktree add -b branch path`.
fn add_baseline(env: &Env, repo: &Repo, path: &std::path::Path, branch: &str) -> Result<()> {
    let path = path.to_string_lossy();
    env.git(&repo.path, &["worktree", "add", "-q", "-b", branch, &path])
        .map(drop)
}

/// How long `git worktree remove --force path` takes; the branch goes after.
fn timed_removal(env: &Env, repo: &Repo, path: &std::path::Path, branch: &str) -> Result<Duration> {
    let took = crate::grove::timed(
        env.git_command(&repo.path)
            .args(["worktree", "remove", "--force"])
            .arg(path),
    )?;
    env.git(&repo.path, &["branch", "-D", branch])?;
    Ok(took)
}

pub fn title(case: u32) -> &'static str {
    match case {
        1 => "spawn → agent running",
        2 => "pooled spawn",
        3 => "collect of a finished agent",
        4 => "grove list --json",
        5 => "durable state updates",
        6 => "memory and idle wake-ups",
        7 => "daemon start-up",
        8 => "an agent's terminal against tmux",
        9 => "grove overlaps with 20 running agents",
        10 => "20 queued agents released one by one",
        11 => "the jail's cost",
        12 => "cleanup off the critical path",
        13 => "what grows with history",
        14 => "grove merge against git merge",
        15 => "20 worktrees on copy-on-write filesystems",
        _ => "unknown case",
    }
}

pub fn run(case: u32, ctx: &Ctx<'_>) -> Vec<Row> {
    eprintln!("grove-bench: case {case}: {}", title(case));
    let result = match case {
        1 => spawn::run(ctx),
        2 => pool::run(ctx),
        3 => collect::run(ctx),
        4 => list::run(ctx),
        5 => state::run(ctx),
        11 => jail::run(ctx),
        12 => cleanup::run(ctx),
        13 => history::run(ctx),
        14 => merge::run(ctx),
        6 => memory::run(ctx),
        7 => startup::run(ctx),
        8 => terminal::run(ctx),
        9 => overlaps::run(ctx),
        10 => queue::run(ctx),
        15 => cow::run(ctx),
        _ => Ok(vec![Row::not_available(
            &case.to_string(),
            "unknown case",
            format!("no case {case}; cases are 1-15"),
        )]),
    };
    result.unwrap_or_else(|e| {
        eprintln!("grove-bench: case {case} failed: {e:#}");
        vec![Row::not_available(
            &case.to_string(),
            title(case),
            format!("error: {e:#}"),
        )]
    })
}

/// Brings the number of agent records up to `target` by spawning `true` agents in the
/// tiny repo, in batches over one connection, for at most `budget`. Returns the count
/// reached.
pub fn make_records(ctx: &Ctx<'_>, target: usize, budget: Duration) -> Result<usize> {
    let env = ctx.env;
    if env.records.get() >= target {
        return Ok(env.records.get());
    }
    let repo = ctx.repos.tiny()?;
    let mut client = env.client()?;
    let start = Instant::now();
    const BATCH: usize = 100;
    while env.records.get() < target && start.elapsed() < budget {
        let n = BATCH.min(target - env.records.get());
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let params = json!({ "argv": ["true"], "repo": repo.path });
            let response = client.call_raw("agent.spawn", params)?;
            if let Some(error) = response.error {
                anyhow::bail!("agent.spawn: {}", error.message);
            }
            let id = response
                .result
                .as_ref()
                .and_then(|r| r["id"].as_str())
                .context("agent.spawn answered without an id")?;
            ids.push(id.to_string());
            env.records.set(env.records.get() + 1);
        }
        let response = client.call_raw("agent.wait", json!({ "ids": ids }))?;
        if let Some(error) = response.error {
            anyhow::bail!("agent.wait: {}", error.message);
        }
        if std::io::stderr().is_terminal() {
            eprint!("\rgrove-bench: {} agent records", env.records.get());
        }
    }
    eprintln!(
        "\rgrove-bench: {} agent records ({:.1}s)",
        env.records.get(),
        start.elapsed().as_secs_f64()
    );
    Ok(env.records.get())
}

/// Spawns `n` agents running `sleep 600` in `repo` and waits until all run. Returns their
/// records as `grove list` gives them once running.
pub fn spawn_sleepers(
    env: &Env,
    repo: &std::path::Path,
    n: usize,
) -> Result<Vec<serde_json::Value>> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let record = env.spawn(repo, &["sleep", "600"])?;
        ids.push(crate::grove::field(&record, "id")?.to_string());
    }
    let mut records = Vec::new();
    crate::grove::poll_until(
        "the agents to run",
        Duration::from_secs(300),
        Duration::from_millis(50),
        || {
            let list = env.grove_json(&env.root, &["list"])?;
            records = list["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| ids.iter().any(|id| a["id"] == id.as_str()))
                .filter(|a| a["status"] == "running")
                .cloned()
                .collect();
            Ok(records.len() == ids.len())
        },
    )?;
    Ok(records)
}

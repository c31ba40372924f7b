//! Case 3: collecting a finished agent that changed one file. Measured from its exit
//! record appearing until `grove wait` returns it collected, against
//! `git worktree remove --force` of a worktree with one changed file.

use super::{add_baseline, baseline_worktree, timed_removal, Ctx};
use crate::grove::{field, poll_until};
use crate::report::Row;
use crate::repos::Repo;
use crate::stats::{ms, Summary};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::Duration;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for repo in [ctx.repos.small(), ctx.repos.big()] {
        let row = repo.and_then(|repo| measure(ctx, repo));
        rows.push(row.unwrap_or_else(|e| {
            Row::not_available("3", "collect, one file changed", format!("error: {e:#}"))
        }));
    }
    Ok(rows)
}

fn measure(ctx: &Ctx<'_>, repo: &Repo) -> Result<Row> {
    let (mut grove, mut git) = (Vec::new(), Vec::new());
    for run in 0..=ctx.runs {
        let g = grove_once(ctx, repo, run)?;
        let b = git_once(ctx, repo, run)?;
        if run > 0 {
            grove.push(ms(g));
            git.push(ms(b));
        }
    }
    Ok(Row::new(
        "3",
        format!("collect, one file changed, {}", repo.label()),
        "ms",
    )
    .grove(Summary::of(&grove))
    .baseline("git worktree remove --force", Summary::of(&git)))
}

fn grove_once(ctx: &Ctx<'_>, repo: &Repo, run: usize) -> Result<Duration> {
    let env = ctx.env;
    let trigger = env.root.join(format!("go-{}-{run}", repo.spec.name));
    // The agent edits one file, then waits for our signal to exit, so that we are
    // watching when its exit record appears.
    let script = format!(
        "echo changed >> '{}' && echo edited && while [ ! -e '{}' ]; do sleep 0.005; done",
        repo.sample_file,
        trigger.display()
    );
    let record = env.spawn(&repo.path, &["sh", "-c", &script])?;
    let id = field(&record, "id")?;
    let log = PathBuf::from(field(&record, "log_path")?);
    poll_until(
        "the agent to edit its file",
        Duration::from_secs(600),
        Duration::from_millis(2),
        || Ok(std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)),
    )?;
    let exit_record = env.exit_record(id);
    std::fs::write(&trigger, b"")?;
    let appeared = poll_until(
        "the agent's exit record",
        Duration::from_secs(60),
        Duration::from_micros(100),
        || Ok(exit_record.exists()),
    )?;
    let out = env.grove_command(&env.root).args(["wait", id]).output()?;
    let took = appeared.elapsed();
    let done = env.grove_json(&env.root, &["show", id])?;
    if !out.status.success() || done["status"] != "collected" {
        bail!(
            "agent {id} did not end collected and succeeded: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    if done["files_changed"] != 1 {
        bail!("agent {id}: expected one changed file, the record says {done}");
    }
    Ok(took)
}

fn git_once(ctx: &Ctx<'_>, repo: &Repo, run: usize) -> Result<Duration> {
    let env = ctx.env;
    let (path, branch) = baseline_worktree(ctx, "collect", repo, run);
    add_baseline(env, repo, &path, &branch)?;
    let file = path.join(&repo.sample_file);
    let mut text = std::fs::read_to_string(&file)?;
    text.push_str("changed\n");
    std::fs::write(&file, text)?;
    timed_removal(env, repo, &path, &branch)
}

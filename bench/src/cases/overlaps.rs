//! Case 9: `grove overlaps` with 20 running agents on the big repo, each with
//! uncommitted changes (one file they all edit, one of its own), against a
//! `git status --porcelain` in each of their worktrees (what a person would run to
//! find the same collisions by hand).

use super::Ctx;
use crate::grove::{field, poll_until, timed};
use crate::report::Row;
use crate::stats::{ms, Summary};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const AGENTS: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let repo = ctx.repos.big()?;
    let trigger = env.root.join("overlaps-go");
    let script = format!(
        "echo \"edit by $GROVE_AGENT_ID\" >> '{}' && echo mine > \"own-$GROVE_AGENT_ID.txt\" \
         && echo edited && while [ ! -e '{}' ]; do sleep 0.05; done",
        repo.sample_file,
        trigger.display()
    );
    let mut agents = Vec::new();
    for _ in 0..AGENTS {
        let record = env.spawn(&repo.path, &["sh", "-c", &script])?;
        let log = PathBuf::from(field(&record, "log_path")?);
        let worktree = PathBuf::from(field(&record, "worktree")?);
        agents.push((field(&record, "id")?.to_string(), log, worktree));
    }
    for (id, log, _) in &agents {
        poll_until(
            &format!("agent {id} to edit its files"),
            Duration::from_secs(900),
            Duration::from_millis(10),
            || Ok(std::fs::metadata(log).is_ok_and(|m| m.len() > 0)),
        )?;
    }
    let (mut grove, mut first) = (Vec::new(), None);
    for run in 0..=ctx.runs {
        let begun = Instant::now();
        let found = env.grove_json(&repo.path, &["overlaps"])?;
        let took = begun.elapsed();
        let shared = found["files"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["path"] == repo.sample_file.as_str());
        // Only this case's agents count: earlier cases (3's collects) may leave
        // unmerged branches on the same file, which `overlaps` lists too.
        let listed: Vec<&str> = shared
            .and_then(|f| f["agents"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|a| a["id"].as_str())
            .collect();
        let agents_on_it = agents
            .iter()
            .filter(|(id, _, _)| listed.contains(&id.as_str()))
            .count();
        if agents_on_it != AGENTS {
            bail!(
                "grove overlaps saw {agents_on_it} of {AGENTS} agents on {}",
                repo.sample_file
            );
        }
        if run == 0 {
            first = Some(ms(took));
        } else {
            grove.push(ms(took));
        }
    }
    let mut git = Vec::new();
    for _ in 0..ctx.runs {
        let mut total = Duration::ZERO;
        for (_, _, worktree) in &agents {
            total += timed(env.git_command(worktree).args(["status", "--porcelain"]))?;
        }
        git.push(ms(total));
    }
    std::fs::write(&trigger, b"")?;
    env.kill_live_agents()?;
    let first = first.map_or_else(String::new, |f| format!("first run {f:.0} ms; "));
    Ok(vec![Row::new(
        "9",
        format!(
            "grove overlaps, {AGENTS} running agents with uncommitted changes, {}",
            repo.label()
        ),
        "ms",
    )
    .grove(Summary::of(&grove))
    .baseline(
        format!("git status --porcelain in each of the {AGENTS} worktrees"),
        Summary::of(&git),
    )
    .note(format!(
        "{first}every run reads each running agent's worktree as it is now"
    ))])
}

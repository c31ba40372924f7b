//! Case 14: `grove merge` of a finished agent's one-file branch, with 20 agents on
//! record, against `git merge --no-ff` of a one-file branch made by plain git, both in
//! the small repository's own checkout, in turns. Every call counts, the first one
//! included: the suggested order for the others is part of what `grove merge` does.
//!
//! It merges into the small repository's `main`, so it runs last.

use super::Ctx;
use crate::grove::{field, timed};
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::Result;

const AGENTS: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let repo = ctx.repos.small()?;
    let mut ids = Vec::with_capacity(AGENTS);
    for n in 0..AGENTS {
        let script = format!(
            "echo agent {n} > merge-agent-{n}.txt && git add -A && git commit -qm 'agent {n}'"
        );
        let record = env.spawn(&repo.path, &["sh", "-c", &script])?;
        ids.push(field(&record, "id")?.to_string());
    }
    let mut wait = vec!["wait"];
    wait.extend(ids.iter().map(String::as_str));
    env.grove(&repo.path, &wait)?;
    let runs = ctx.runs.min(AGENTS);
    let plain: Vec<String> = (0..runs)
        .map(|n| format!("bench/plain-merge-{n}"))
        .collect();
    for (n, branch) in plain.iter().enumerate() {
        one_file_branch(ctx, branch, n)?;
    }
    let (mut grove, mut git) = (Vec::new(), Vec::new());
    for (id, branch) in ids.iter().zip(&plain) {
        grove.push(ms(timed(
            env.grove_command(&repo.path).args(["merge", id]),
        )?));
        git.push(ms(timed(env.git_command(&repo.path).args([
            "merge",
            "--no-ff",
            "--no-edit",
            branch,
        ]))?));
    }
    Ok(vec![Row::new(
        "14",
        format!("grove merge of a one-file branch, {AGENTS} agents on record"),
        "ms",
    )
    .grove(Summary::of(&grove))
    .baseline("git merge --no-ff of a one-file branch", Summary::of(&git))
    .goal(Goal::at_most(Metric::Ratio, 1.5))
    .note(
        "every call counted, the first included; same checkout, in turns",
    )])
}

/// A branch off `main` with one commit that adds one file, made in the checkout and
/// left again (not timed).
fn one_file_branch(ctx: &Ctx<'_>, branch: &str, n: usize) -> Result<()> {
    let env = ctx.env;
    let repo = ctx.repos.small()?;
    env.git(&repo.path, &["checkout", "-q", "-b", branch, "main"])?;
    std::fs::write(repo.path.join(format!("merge-plain-{n}.txt")), "plain\n")?;
    env.git(&repo.path, &["add", "-A"])?;
    env.git(&repo.path, &["commit", "-qm", &format!("plain {n}")])?;
    env.git(&repo.path, &["checkout", "-q", "main"]).map(drop)
}

//! `grove discard`: drop an agent's branch, keeping its tip reachable for a while.

use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use crate::gitcli::{short, Work};
use crate::output::{print_json, safe};
use anyhow::{Context, Result};
use grove_proto::methods::{Get, IdParams};
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

#[derive(Serialize)]
struct Discarded {
    id: String,
    branch: String,
    commit: String,
    salvage_ref: String,
}

pub fn run(id: &str, yes: bool, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    let id = record.id.clone();
    if !record.status.is_final() {
        return Err(UsageError(format!(
            "agent {id} is still {}; stop it first with `grove kill {id}`",
            record.status
        ))
        .into());
    }
    let Some(work) = Work::load(record)? else {
        return Err(UsageError(format!(
            "agent {id} has no branch to discard (it left no commits, or the branch is gone)"
        ))
        .into());
    };
    let branch = &work.record.branch;
    if let Some(wt) = work
        .git
        .worktrees()?
        .into_iter()
        .find(|w| w.branch.as_deref() == Some(branch))
    {
        return Err(UsageError(format!(
            "{branch} is checked out in {}; remove that worktree first (`grove rm {id}` for a kept one)",
            wt.path.display()
        ))
        .into());
    }
    if !yes && !confirm(&work)? {
        eprintln!("grove: kept {}", safe(branch));
        return Ok(ExitCode::from(1));
    }
    let salvage_ref = format!("{}discarded-{id}", grove_proto::git::SALVAGE_PREFIX);
    // The ref first: if deleting the branch fails, nothing is lost either way.
    work.git
        .run(&[
            "update-ref",
            "-m",
            &format!("grove: discard agent {id} ({branch})"),
            &salvage_ref,
            &work.tip,
        ])
        .with_context(|| format!("keeping {branch} at {salvage_ref}"))?;
    work.git
        .run(&["branch", "-D", branch])
        .with_context(|| format!("deleting {branch}"))?;
    let discarded = Discarded {
        id,
        branch: branch.clone(),
        commit: work.tip.clone(),
        salvage_ref,
    };
    if json {
        print_json(&discarded)?;
    } else {
        println!(
            "discarded {} (was {}); its commits stay reachable at {} until grove's prune pass expires it",
            safe(&discarded.branch),
            short(&discarded.commit),
            safe(&discarded.salvage_ref)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn confirm(work: &Work) -> Result<bool> {
    let branch = &work.record.branch;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(UsageError(format!(
            "not discarding {branch} without confirmation, and there is no terminal to ask on; \
             pass --yes to discard it"
        ))
        .into());
    }
    let (ahead, _) = work.git.ahead_behind(&work.base_tip, &work.tip)?;
    eprint!(
        "Delete branch {} ({ahead} commit(s) not on {}, tip {})? [y/N] ",
        safe(branch),
        safe(&work.base_label()),
        short(&work.tip)
    );
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

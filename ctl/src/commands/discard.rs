//! `grove discard`: drop an agent's branch, keeping its tip reachable for a while. The
//! daemon does it (`agent.discard`, in the repository's lane) and its record says so;
//! git here only reads, for the question and for `--merged`.

use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use crate::gitcli::{short, Work};
use crate::output::{print_json, safe};
use anyhow::{Context, Result};
use grove_proto::methods::{Discard, DiscardResult, Get, IdParams};
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

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
        // The daemon answers "no branch" too, and its record learns that it is gone
        // (deleted with git since).
        connect(&dirs()?)?.call::<Discard>(&IdParams { id: id.clone() })?;
        return Err(UsageError(format!(
            "agent {id} has no branch to discard (it left no commits, or the branch is gone)"
        ))
        .into());
    };
    if !yes && !confirm(&work)? {
        eprintln!("grove: kept {}", safe(&work.record.branch));
        return Ok(ExitCode::from(1));
    }
    let discarded = discard(&work)?;
    if json {
        print_json(&discarded)?;
    } else {
        said(&discarded);
    }
    Ok(ExitCode::SUCCESS)
}

/// `grove discard --merged`: every finished agent's branch that is merged (by git, or by
/// `grove merge --squash/--rebase`) and checked out nowhere, after one confirmation.
pub fn run_merged(yes: bool, json: bool) -> Result<ExitCode> {
    let records = crate::connect::list_agents(&mut connect(&dirs()?)?, true)?;
    let works: Vec<Work> = crate::gitcli::works(records)?
        .into_iter()
        .filter(|w| !w.live() && w.merged())
        .collect();
    let mut merged = Vec::new();
    for work in works {
        let checked_out = work
            .git
            .worktrees()?
            .into_iter()
            .any(|w| w.branch.as_deref() == Some(work.record.branch.as_str()));
        if checked_out {
            eprintln!(
                "grove: kept {}: it is checked out (`grove rm {}` removes a kept worktree)",
                safe(&work.record.branch),
                work.record.id
            );
        } else {
            merged.push(work);
        }
    }
    if merged.is_empty() {
        if json {
            print_json(&serde_json::json!({ "discarded": [] }))?;
        } else {
            println!("no merged agent branch to discard");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !yes && !confirm_all(&merged)? {
        eprintln!("grove: kept them all");
        return Ok(ExitCode::from(1));
    }
    let mut discarded = Vec::new();
    for work in &merged {
        discarded.push(discard(work)?);
    }
    if json {
        print_json(&serde_json::json!({ "discarded": discarded }))?;
    } else {
        discarded.iter().for_each(said);
    }
    Ok(ExitCode::SUCCESS)
}

fn said(discarded: &DiscardResult) {
    println!(
        "discarded {} (was {}); its commits stay reachable at {} until grove's prune pass expires it",
        safe(&discarded.branch),
        short(&discarded.commit),
        safe(&discarded.salvage_ref)
    );
}

/// The daemon deletes the branch in the repository's lane and records it; the tip goes
/// under the salvage refs first, so nothing is lost if the delete fails.
fn discard(work: &Work) -> Result<DiscardResult> {
    let id = &work.record.id;
    Ok(connect(&dirs()?)?.call::<Discard>(&IdParams { id: id.clone() })?)
}

fn confirm_all(works: &[Work]) -> Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(UsageError(format!(
            "not discarding {} merged branches without confirmation, and there is no \
             terminal to ask on; pass --yes to discard them",
            works.len()
        ))
        .into());
    }
    eprintln!("merged agent branches:");
    for w in works {
        eprintln!("  {}  {}", safe(&w.record.branch), short(&w.tip));
    }
    eprint!("Delete these {} branches? [y/N] ", works.len());
    yes_from(&stdin)
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
    yes_from(&stdin)
}

/// The answer to a question just asked on stderr: yes only for `y` or `yes`.
pub(super) fn yes_from(stdin: &std::io::Stdin) -> Result<bool> {
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

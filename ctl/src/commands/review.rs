//! `grove review`: the finished agents' branches, ready to read and merge.

use crate::connect::{connect, dirs};
use crate::gitcli::{works, Work};
use crate::output::{
    cell, changes, paint, print_json, safe, safe_block, safe_os, safe_path, status_tone, table,
};
use anyhow::{Context, Result};
use comfy_table::Cell;
use grove_proto::methods::{Get, IdParams};
use grove_proto::types::{AgentStatus, Outcome};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Serialize)]
struct Entry {
    id: String,
    name: Option<String>,
    repo: PathBuf,
    branch: String,
    head_commit: String,
    /// The base branch, or the commit the agent started from when that branch is gone.
    base: String,
    base_tip: String,
    merge_base: String,
    ahead: u64,
    behind: u64,
    files_changed: u64,
    insertions: u64,
    deletions: u64,
    status: AgentStatus,
    outcome: Option<Outcome>,
    status_text: String,
    report: Option<String>,
}

#[derive(Serialize)]
struct Detail {
    #[serde(flatten)]
    entry: Entry,
    commits: Vec<Commit>,
    diffstat: String,
}

#[derive(Serialize)]
struct Commit {
    commit: String,
    subject: String,
}

pub fn run(id: Option<String>, all: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    match id {
        Some(id) => {
            let record = client.call::<Get>(&IdParams { id })?;
            let id = record.id.clone();
            let Some(work) = Work::load(record)? else {
                eprintln!("grove: agent {id} has no branch: it left no commits beyond its base, or its branch was deleted");
                return Ok(ExitCode::SUCCESS);
            };
            detail(&work, json)
        }
        None => {
            let records = crate::connect::list_agents(&mut client, true)?;
            let mut works: Vec<Work> = works(records)?
                .into_iter()
                .filter(|w| !w.live() && (all || !w.merged()))
                .collect();
            works.sort_by_key(|w| std::cmp::Reverse(w.record.created_at_ms));
            let entries = works.iter().map(entry).collect::<Result<Vec<_>>>()?;
            summary(entries, json)
        }
    }
}

fn entry(w: &Work) -> Result<Entry> {
    let r = &w.record;
    let (ahead, behind) = w.git.ahead_behind(&w.base_tip, &w.tip)?;
    let (files_changed, insertions, deletions) = w.git.shortstat(&w.merge_base, &w.tip)?;
    Ok(Entry {
        id: r.id.clone(),
        name: r.name.clone(),
        repo: r.repo.clone(),
        branch: r.branch.clone(),
        head_commit: w.tip.clone(),
        base: w.base_label(),
        base_tip: w.base_tip.clone(),
        merge_base: w.merge_base.clone(),
        ahead,
        behind,
        files_changed,
        insertions,
        deletions,
        status: r.status,
        outcome: r.outcome,
        status_text: r.status_text(),
        report: r.report.clone(),
    })
}

fn summary(entries: Vec<Entry>, json: bool) -> Result<ExitCode> {
    if json {
        #[derive(Serialize)]
        struct Agents {
            agents: Vec<Entry>,
        }
        print_json(&Agents { agents: entries })?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        println!("nothing to review: no finished agent has a branch with work");
        return Ok(ExitCode::SUCCESS);
    }
    let many_repos = entries.iter().any(|e| e.repo != entries[0].repo);
    let mut header = vec![
        "ID", "NAME", "BRANCH", "BASE", "AHEAD", "BEHIND", "FILES", "CHANGES", "STATUS", "REPORT",
    ];
    if many_repos {
        header.insert(2, "REPO");
    }
    let rows = entries
        .iter()
        .map(|e| {
            let mut row = vec![
                Cell::new(safe(&e.id)),
                Cell::new(safe(e.name.as_deref().unwrap_or("-"))),
                Cell::new(safe(&e.branch)),
                Cell::new(safe(&e.base)),
                Cell::new(e.ahead),
                Cell::new(e.behind),
                Cell::new(e.files_changed),
                Cell::new(changes(e.insertions, e.deletions)),
                cell(&e.status_text, status_tone(e.status, e.outcome)),
                Cell::new(safe(&first_line(e.report.as_deref()))),
            ];
            if many_repos {
                row.insert(
                    2,
                    Cell::new(e.repo.file_name().map(safe_os).unwrap_or_default()),
                );
            }
            row
        })
        .collect();
    println!("{}", table(&header, rows));
    println!("details: `grove review ID`; merge: `grove merge ID`; drop: `grove discard ID`");
    Ok(ExitCode::SUCCESS)
}

/// A report's first line, marked when there is more ("..."); "-" for none.
fn first_line(report: Option<&str>) -> String {
    match report.map(str::trim) {
        None | Some("") => "-".into(),
        Some(text) => match text.split_once('\n') {
            Some((first, _)) => format!("{} ...", first.trim_end()),
            None => text.into(),
        },
    }
}

fn detail(w: &Work, json: bool) -> Result<ExitCode> {
    let entry = entry(w)?;
    let log = w
        .git
        .run(&[
            "log",
            "--format=%h%x09%s",
            &format!("{}..{}", w.base_tip, w.tip),
        ])
        .context("listing the agent's commits")?;
    let commits = log
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(commit, subject)| Commit {
            commit: commit.into(),
            subject: subject.into(),
        })
        .collect();
    let diffstat = w
        .git
        .run(&["diff", "--stat", "--no-color", &w.merge_base, &w.tip])
        .context("computing the diffstat")?;
    let detail = Detail {
        entry,
        commits,
        diffstat,
    };
    if json {
        print_json(&detail)?;
        return Ok(ExitCode::SUCCESS);
    }
    let e = &detail.entry;
    let fields = [
        ("agent", safe(&e.id)),
        ("name", safe(e.name.as_deref().unwrap_or("-"))),
        (
            "status",
            paint(&e.status_text, status_tone(e.status, e.outcome)),
        ),
        ("repo", safe_path(&e.repo)),
        ("branch", safe(&e.branch)),
        (
            "base",
            format!("{} ({} ahead, {} behind)", safe(&e.base), e.ahead, e.behind),
        ),
        (
            "changes",
            format!(
                "{} {} {}",
                e.files_changed,
                if e.files_changed == 1 {
                    "file"
                } else {
                    "files"
                },
                changes(e.insertions, e.deletions)
            ),
        ),
        ("report", safe_block(e.report.as_deref().unwrap_or("-"), 9)),
    ];
    for (k, v) in fields {
        println!("{k:<8} {v}");
    }
    println!("\ncommits ({}..{}):", safe(&e.base), safe(&e.branch));
    if detail.commits.is_empty() {
        println!("  (none: the base already has them all)");
    }
    for c in &detail.commits {
        println!("  {} {}", safe(&c.commit), safe(&c.subject));
    }
    println!("\n{}", safe_block(detail.diffstat.trim_end(), 0));
    Ok(ExitCode::SUCCESS)
}

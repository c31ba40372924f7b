use crate::connect::{connect, dirs};
use crate::output::{ago, diffstat, duration_precise, print_json, status_text};
use anyhow::Result;
use grove_proto::methods::{Get, IdParams};
use grove_proto::types::AgentRecord;
use std::process::ExitCode;

pub fn run(id: &str, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    if json {
        print_json(&record)?;
    } else {
        print!("{}", describe(&record));
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(r: &AgentRecord) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let mut lines = vec![
        ("id", r.id.clone()),
        ("name", opt(r.name.clone())),
        ("status", status_text(r)),
        ("command", shell_words(&r.argv)),
        ("repo", r.repo.display().to_string()),
        (
            "base",
            format!("{} ({})", r.base_ref, short(&r.base_commit)),
        ),
        (
            "branch",
            if r.branch_exists {
                r.branch.clone()
            } else {
                format!("{} (removed: no commits beyond the base)", r.branch)
            },
        ),
        ("head", opt(r.head_commit.as_deref().map(short))),
        ("changes", diffstat(r)),
        ("session", r.session.clone()),
        ("pid", opt(r.pid.map(|p| p.to_string()))),
        ("created", ago(r.created_at_ms)),
        ("started", opt(r.started_at_ms.map(ago))),
        ("ended", opt(r.ended_at_ms.map(ago))),
        ("duration", opt(r.duration_ms().map(duration_precise))),
        ("exit code", opt(r.exit_code.map(|c| c.to_string()))),
        ("exit signal", opt(r.exit_signal.map(|s| s.to_string()))),
        ("worktree", r.worktree.display().to_string()),
        ("log", r.log_path.display().to_string()),
    ];
    if !r.env_names.is_empty() {
        lines.push(("env", r.env_names.join(", ")));
    }
    if r.salvaged {
        lines.push((
            "salvaged",
            "yes: uncommitted work was committed by grove".into(),
        ));
    }
    if let Some(parent) = &r.parent {
        lines.push(("parent", format!("{parent} (depth {})", r.depth)));
    }
    if let Some(report) = &r.report {
        lines.push(("report", report.clone()));
    }
    if let Some(error) = &r.error {
        lines.push(("error", error.clone()));
    }
    lines
        .into_iter()
        .map(|(k, v)| format!("{k:<12} {v}\n"))
        .collect()
}

fn short(oid: &str) -> String {
    oid.chars().take(10).collect()
}

fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

use crate::connect::{connect, dirs};
use crate::gitcli::Git;
use crate::output::{
    ago, diffstat, duration, duration_precise, print_json, safe, safe_block, status_text,
};
use anyhow::Result;
use grove_proto::methods::{Get, IdParams};
use grove_proto::types::AgentRecord;
use std::process::ExitCode;

pub fn run(id: &str, json: bool) -> Result<ExitCode> {
    let mut record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    // The record knows what grove did; git knows whether the branch was discarded or
    // deleted by hand since.
    let deleted_since = record.branch_exists
        && record.status.is_final()
        && Git::new(&record.repo)
            .branch_tip(&record.branch)
            .is_ok_and(|tip| tip.is_none());
    record.branch_exists &= !deleted_since;
    let discarded = discarded_at(&record);
    if json {
        print_json(&record)?;
    } else {
        print!("{}", describe(&record, deleted_since, discarded.as_deref()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The salvage ref `grove discard` kept the gone branch's tip at, while it is there.
fn discarded_at(record: &AgentRecord) -> Option<String> {
    if record.branch_exists || !record.status.is_final() {
        return None;
    }
    let salvage_ref = grove_proto::git::discarded_ref(&record.id);
    let kept = Git::new(&record.repo).commit(&salvage_ref).ok().flatten();
    kept.map(|tip| format!("{salvage_ref} ({})", short(&tip)))
}

fn describe(r: &AgentRecord, deleted_since: bool, discarded: Option<&str>) -> String {
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
            } else if let Some(kept) = discarded {
                format!("{} (discarded: its tip is kept at {kept})", r.branch)
            } else if deleted_since {
                format!("{} (deleted since: `grove discard` or git)", r.branch)
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
        ("cpu time", opt(r.cpu_ms.map(cpu_time))),
        ("peak memory", opt(r.peak_memory_bytes.map(size))),
        ("limits", limits(r)),
        (
            "jail",
            if r.jail && r.jail_write.is_empty() {
                "yes: writes confined to the worktree (Landlock)".into()
            } else if r.jail {
                let extra: Vec<String> = r
                    .jail_write
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                format!(
                    "yes: writes confined to the worktree and {} (Landlock)",
                    extra.join(", ")
                )
            } else {
                "no".into()
            },
        ),
        (
            "worktree",
            format!(
                "{}{}",
                r.worktree.display(),
                if r.cloned {
                    " (cloned from its base's template, copy-on-write)"
                } else {
                    ""
                }
            ),
        ),
        ("log", r.log_path.display().to_string()),
    ];
    if r.jail {
        lines.push((
            "jail home",
            if r.jail_home.is_empty() {
                "private and empty".into()
            } else {
                format!("private, with a copy of ~/{}", r.jail_home.join(", ~/"))
            },
        ));
    }
    if r.tty.is_some() && !r.status.is_running() {
        let kept = r
            .log_path
            .with_file_name(grove_proto::console::LAST_SCREEN_FILE)
            .exists();
        lines.push((
            "last screen",
            if kept {
                format!("kept: `grove screen {}` shows it", r.id)
            } else {
                "not kept".into()
            },
        ));
    }
    if !r.env_names.is_empty() {
        lines.push(("env", r.env_names.join(", ")));
    }
    if r.salvaged {
        lines.push((
            "salvaged",
            "yes: uncommitted work was committed by grove".into(),
        ));
    }
    if let Some(problem) = &r.salvage_error {
        lines.push(("salvage", format!("FAILED: {problem}")));
    }
    if r.tampered {
        lines.push((
            "tampered",
            "yes: the agent changed its worktree's git layout; it was kept, not salvaged through"
                .into(),
        ));
    }
    if let Some(parent) = &r.parent {
        lines.push(("parent", format!("{parent} (depth {})", r.depth)));
    }
    if let Some(question) = &r.question {
        lines.push(("question", question.text.clone()));
        if !question.choices.is_empty() {
            lines.push(("choices", question.choices.join(", ")));
        }
        lines.push((
            "answer with",
            format!("grove answer {} TEXT (the user, or its parent agent)", r.id),
        ));
    }
    if let Some(answered) = &r.answer {
        lines.push((
            "last answer",
            format!(
                "{} (by {}, {}, checkpoint {}) to: {}",
                answered.answer,
                answered.by,
                ago(answered.at_ms),
                answered.checkpoint,
                answered.question
            ),
        ));
    }
    if let Some(report) = &r.report {
        lines.push(("report", report.clone()));
    }
    if let Some(error) = &r.error {
        lines.push(("error", error.clone()));
    }
    // Almost every value came from the agent or its repository; the status is ours,
    // and may be coloured.
    lines
        .into_iter()
        .map(|(k, v)| match k {
            "status" => format!("{k:<12} {v}\n"),
            "report" | "error" | "question" | "last answer" => {
                format!("{k:<12} {}\n", safe_block(&v, 13))
            }
            _ => format!("{k:<12} {}\n", safe(&v)),
        })
        .collect()
}

/// "0.25s" under a minute, then as other durations.
fn cpu_time(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.2}s", ms as f64 / 1000.0)
    } else {
        duration(ms)
    }
}

/// "1.5 GiB", "12.0 MiB", "512 KiB", "100 B".
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn limits(r: &AgentRecord) -> String {
    let l = &r.limits;
    let parts: Vec<String> = [
        l.memory_bytes.map(|b| format!("memory {}", size(b))),
        l.cpu_seconds.map(|s| format!("cpu {s}s")),
        l.max_files.map(|n| format!("files {n}")),
        l.max_procs.map(|n| format!("processes {n}")),
        r.timeout_ms.map(|ms| format!("timeout {}", duration(ms))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_times_read_well() {
        assert_eq!(size(100), "100 B");
        assert_eq!(size(512 << 10), "512.0 KiB");
        assert_eq!(size(3 << 29), "1.5 GiB");
        assert_eq!(cpu_time(250), "0.25s");
        assert_eq!(cpu_time(120_000), "2m");
    }
}

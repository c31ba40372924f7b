//! Shared printing: JSON, tables, ages.

use anyhow::Result;
use grove_agent_shim::now_ms;
use grove_proto::types::AgentRecord;
use serde::Serialize;

pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// "42s", "3m", "5h", "2d": how long ago `ms` was.
pub fn age(ms: u64) -> String {
    duration(now_ms().saturating_sub(ms))
}

pub fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

pub fn diffstat(record: &AgentRecord) -> String {
    match (record.files_changed, record.insertions, record.deletions) {
        (Some(1), Some(ins), Some(del)) => format!("1 file +{ins} -{del}"),
        (Some(files), Some(ins), Some(del)) => format!("{files} files +{ins} -{del}"),
        _ => "-".into(),
    }
}

pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_header(header.to_vec());
    for row in rows {
        table.add_row(row);
    }
    table
        .lines()
        .map(|line| line.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per finished agent, for `wait` and `spawn --wait`.
pub fn result_line(record: &AgentRecord) -> String {
    let branch = if record.branch_exists {
        record.branch.as_str()
    } else {
        "(no commits; branch removed)"
    };
    let line = format!(
        "{}  {}  {}  {}",
        record.id,
        record.status_text(),
        branch,
        diffstat(record)
    );
    match &record.report {
        Some(report) => format!(
            "{line}\n    report: {}",
            report.replace('\n', "\n            ")
        ),
        None => line,
    }
}

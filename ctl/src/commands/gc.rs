use crate::connect::{connect, dirs};
use crate::output::{ago, print_json, table};
use anyhow::Result;
use grove_proto::methods::{Gc, GcLog, GcLogParams, GcParams};
use grove_proto::types::Removal;
use std::process::ExitCode;

pub fn run(dry_run: bool, log: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    if log {
        let log = client.call::<GcLog>(&GcLogParams { limit: None })?;
        if json {
            print_json(&log)?;
        } else if log.removals.is_empty() && log.sessions.is_empty() {
            println!("grove has removed nothing yet");
        } else {
            if !log.removals.is_empty() {
                println!("{}", removal_table(&log.removals));
            }
            if !log.sessions.is_empty() {
                println!("{}", super::session::removal_table(&log.sessions));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = client.call::<Gc>(&GcParams { dry_run })?;
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    if report.removals.is_empty() {
        println!("no idle worktrees to remove");
    } else {
        println!("{verb} {} worktrees:", report.removals.len());
        println!("{}", removal_table(&report.removals));
    }
    for why in &report.kept {
        println!("kept: {why}");
    }
    print_past_retention(
        if dry_run { "would forget" } else { "forgot" },
        "finished agents",
        &report.records_deleted,
    );
    print_past_retention(
        if dry_run { "would expire" } else { "expired" },
        "discarded branch refs",
        &report.refs_expired,
    );
    Ok(ExitCode::SUCCESS)
}

/// "forgot 2 finished agents past retention: a, b", when there were any.
fn print_past_retention(verb: &str, what: &str, names: &[String]) {
    if !names.is_empty() {
        println!(
            "{verb} {} {what} past retention: {}",
            names.len(),
            names.join(", ")
        );
    }
}

fn removal_table(removals: &[Removal]) -> String {
    let rows = removals
        .iter()
        .map(|r| {
            vec![
                ago(r.at_ms),
                r.agent_id.clone().unwrap_or_else(|| "-".into()),
                r.path.display().to_string(),
                r.reason.clone(),
                r.salvage_ref.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(&["WHEN", "AGENT", "PATH", "WHY", "WORK IS ON"], rows)
}

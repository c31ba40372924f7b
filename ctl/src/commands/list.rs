use crate::connect::{connect, dirs};
use crate::output::{ago, pretty_into, record_changes, safe, safe_os, status_cell, table};
use anyhow::Result;
use comfy_table::Cell;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

pub fn run(all: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    if json {
        print_json_list(&mut client, all)?;
        return Ok(ExitCode::SUCCESS);
    }
    let agents = crate::connect::list_agents(&mut client, all)?;
    if agents.is_empty() {
        if all {
            println!("no agents yet; start one with `grove spawn -- COMMAND`");
        } else {
            println!("no live agents; `grove list --all` shows finished ones");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows = agents
        .iter()
        .map(|a| {
            vec![
                Cell::new(safe(&a.id)),
                Cell::new(safe(a.name.as_deref().unwrap_or("-"))),
                Cell::new(a.repo.file_name().map(safe_os).unwrap_or_default()),
                status_cell(a),
                Cell::new(ago(a.created_at_ms)),
                Cell::new(record_changes(a)),
                Cell::new(if a.branch_exists {
                    safe(&a.branch)
                } else {
                    "-".into()
                }),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["ID", "NAME", "REPO", "STATUS", "CREATED", "CHANGES", "BRANCH"],
            rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// `{"agents": [...]}` with the records as the daemon wrote them, never parsed into
/// types and serialized again (that was most of the time a long list took). For
/// programs the answer's bytes go out as they came, compact; on a terminal the document
/// is laid out as every `--json` output is.
fn print_json_list(client: &mut grove_proto::Client, all: bool) -> Result<()> {
    let pages = crate::connect::list_agents_raw(client, all)?;
    let pages = pages.iter().map(|p| p.records()).filter(|r| !r.is_empty());
    let mut stdout = std::io::stdout().lock();
    if !stdout.is_terminal() {
        stdout.write_all(br#"{"agents":["#)?;
        for (n, records) in pages.enumerate() {
            if n > 0 {
                stdout.write_all(b",")?;
            }
            stdout.write_all(records)?;
        }
        stdout.write_all(b"]}\n")?;
        return Ok(());
    }
    let mut out = br#"{
  "agents": ["#
        .to_vec();
    let mut any = false;
    for records in pages {
        out.extend_from_slice(if any { b",\n    " } else { b"\n    " });
        pretty_into(&mut out, records, 2);
        any = true;
    }
    out.extend_from_slice(if any { b"\n  ]\n}\n" } else { b"]\n}\n" });
    stdout.write_all(&out)?;
    Ok(())
}

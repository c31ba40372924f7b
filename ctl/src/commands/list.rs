use crate::cli::ListFilter;
use crate::connect::{connect, dirs};
use crate::output::{ago, pretty_into, record_changes, safe, safe_os, status_cell, table};
use anyhow::Result;
use comfy_table::Cell;
use grove_proto::types::AgentRecord;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(all: bool, filter: &ListFilter, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    if json && filter.is_empty() {
        print_json_list(&mut client, all)?;
        return Ok(ExitCode::SUCCESS);
    }
    // A status of finished agents needs the finished ones.
    let all = all || filter.status.is_some();
    let keep = Keep::new(filter)?;
    let mut agents = crate::connect::list_agents(&mut client, all)?;
    agents.retain(|a| keep.keeps(a));
    if json {
        crate::output::print_json(&serde_json::json!({ "agents": agents }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if agents.is_empty() && !filter.is_empty() {
        println!("no agent matches; `grove list --all` shows every agent");
        return Ok(ExitCode::SUCCESS);
    }
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
/// programs the answer's bytes go out page by page as they came, compact (a list cut
/// short by an error is then not a whole document, and the exit code says so); on a
/// terminal the document is laid out as every `--json` output is.
fn print_json_list(client: &mut grove_proto::Client, all: bool) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if !stdout.is_terminal() {
        stdout.write_all(br#"{"agents":["#)?;
        let mut first = true;
        crate::connect::list_agents_raw(client, all, |records| {
            if !std::mem::take(&mut first) {
                stdout.write_all(b",")?;
            }
            stdout.write_all(records)
        })?;
        stdout.write_all(b"]}\n")?;
        return Ok(());
    }
    let mut out = br#"{
  "agents": ["#
        .to_vec();
    let mut any = false;
    crate::connect::list_agents_raw(client, all, |records| {
        out.extend_from_slice(if any { b",\n    " } else { b"\n    " });
        pretty_into(&mut out, records, 2);
        any = true;
        Ok(())
    })?;
    out.extend_from_slice(if any { b"\n  ]\n}\n" } else { b"]\n}\n" });
    stdout.write_all(&out)?;
    Ok(())
}

/// The filter of `grove list`, with the repository resolved once.
struct Keep<'a> {
    filter: &'a ListFilter,
    repo: Option<PathBuf>,
}

impl<'a> Keep<'a> {
    fn new(filter: &'a ListFilter) -> Result<Self> {
        let repo =
            match &filter.repo {
                Some(path) => Some(std::fs::canonicalize(path).map_err(|e| {
                    crate::exit::UsageError(format!("--repo {}: {e}", path.display()))
                })?),
                None => None,
            };
        Ok(Keep { filter, repo })
    }

    fn keeps(&self, agent: &AgentRecord) -> bool {
        let repo_ok = self.repo.as_ref().is_none_or(|path| {
            let theirs = std::fs::canonicalize(&agent.repo).unwrap_or(agent.repo.clone());
            path.starts_with(&theirs)
        });
        let status_ok = self.filter.status.as_deref().is_none_or(|wanted| {
            agent.status.as_str() == wanted || agent.outcome.is_some_and(|o| o.as_str() == wanted)
        });
        let name_ok = self
            .filter
            .name
            .as_deref()
            .is_none_or(|name| agent.name.as_deref() == Some(name));
        repo_ok && status_ok && name_ok
    }
}

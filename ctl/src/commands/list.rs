use crate::connect::{connect, dirs};
use crate::output::{ago, print_json, record_changes, status_cell, table};
use anyhow::Result;
use comfy_table::Cell;
use grove_proto::methods::AgentList;
use std::process::ExitCode;

pub fn run(all: bool, json: bool) -> Result<ExitCode> {
    let list = AgentList {
        agents: crate::connect::list_agents(&mut connect(&dirs()?)?, all)?,
        next: None,
    };
    if json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.agents.is_empty() {
        if all {
            println!("no agents yet; start one with `grove spawn -- COMMAND`");
        } else {
            println!("no live agents; `grove list --all` shows finished ones");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows = list
        .agents
        .iter()
        .map(|a| {
            vec![
                Cell::new(&a.id),
                Cell::new(a.name.as_deref().unwrap_or("-")),
                Cell::new(
                    a.repo
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
                status_cell(a),
                Cell::new(ago(a.created_at_ms)),
                Cell::new(record_changes(a)),
                Cell::new(if a.branch_exists {
                    a.branch.as_str()
                } else {
                    "-"
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

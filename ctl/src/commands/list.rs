use crate::connect::{connect, dirs};
use crate::output::{age, print_json, table};
use anyhow::Result;
use grove_proto::methods::{List, ListParams};
use std::process::ExitCode;

pub fn run(all: bool, json: bool) -> Result<ExitCode> {
    let list = connect(&dirs()?)?.call::<List>(&ListParams { all })?;
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
                a.id.clone(),
                a.name.clone().unwrap_or_else(|| "-".into()),
                a.repo
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                a.status_text(),
                age(a.created_at_ms),
                if a.branch_exists {
                    a.branch.clone()
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["ID", "NAME", "REPO", "STATUS", "AGE", "BRANCH"], rows)
    );
    Ok(ExitCode::SUCCESS)
}

use crate::connect::{connect, dirs};
use crate::output::{ago, cell, print_json, safe, table, Tone};
use anyhow::Result;
use comfy_table::Cell;
use grove_proto::methods::{Empty, Queue};
use std::process::ExitCode;

pub fn run(json: bool) -> Result<ExitCode> {
    let list = connect(&dirs()?)?.call::<Queue>(&Empty {})?;
    if json {
        print_json(&list)?;
    } else if list.agents.is_empty() {
        println!("the queue is empty");
    } else {
        let rows = list
            .agents
            .iter()
            .map(|a| {
                vec![
                    cell(
                        a.queue_position.map(|p| p.to_string()).unwrap_or_default(),
                        Some(Tone::Warn),
                    ),
                    Cell::new(safe(&a.id)),
                    Cell::new(safe(a.name.as_deref().unwrap_or("-"))),
                    Cell::new(ago(a.created_at_ms)),
                    Cell::new(safe(&a.argv.join(" "))),
                ]
            })
            .collect();
        println!("{}", table(&["#", "ID", "NAME", "QUEUED", "COMMAND"], rows));
    }
    Ok(ExitCode::SUCCESS)
}

use crate::connect::{connect, dirs};
use crate::output::{age, print_json, table};
use anyhow::Result;
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
                    a.queue_position.map(|p| p.to_string()).unwrap_or_default(),
                    a.id.clone(),
                    a.name.clone().unwrap_or_else(|| "-".into()),
                    age(a.created_at_ms),
                    a.argv.join(" "),
                ]
            })
            .collect();
        println!(
            "{}",
            table(&["#", "ID", "NAME", "WAITING", "COMMAND"], rows)
        );
    }
    Ok(ExitCode::SUCCESS)
}

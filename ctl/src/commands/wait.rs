use crate::connect::{connect, dirs};
use crate::exit::AGENT_FAILED;
use crate::output::{print_json, result_line};
use anyhow::Result;
use grove_proto::methods::{Wait, WaitMode, WaitParams};
use std::process::ExitCode;

pub fn run(ids: Vec<String>, any: bool, json: bool) -> Result<ExitCode> {
    let mode = if any { WaitMode::Any } else { WaitMode::All };
    let list = connect(&dirs()?)?.call::<Wait>(&WaitParams { ids, mode })?;
    if json {
        print_json(&list)?;
    } else {
        for record in &list.agents {
            println!("{}", result_line(record));
        }
    }
    Ok(if list.agents.iter().all(|a| a.succeeded()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

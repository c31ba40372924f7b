use crate::connect::{connect, dirs};
use crate::exit::AGENT_FAILED;
use crate::output::{print_json, result_line};
use anyhow::Result;
use grove_proto::methods::{Wait, WaitMode, WaitParams, WaitUntil};
use std::process::ExitCode;

pub fn run(ids: Vec<String>, any: bool, until: &str, json: bool) -> Result<ExitCode> {
    let mode = if any { WaitMode::Any } else { WaitMode::All };
    let until = match until {
        "waiting" => WaitUntil::Waiting,
        _ => WaitUntil::Finished,
    };
    let list = connect(&dirs()?)?.call::<Wait>(&WaitParams { ids, mode, until })?;
    if json {
        print_json(&list)?;
    } else {
        for record in &list.agents {
            println!("{}", result_line(record));
        }
    }
    // Waiting for input is what `--until waiting` waited for: not a failure.
    let fine = |a: &grove_proto::types::AgentRecord| {
        a.succeeded() || (until == WaitUntil::Waiting && !a.status.is_final())
    };
    Ok(if list.agents.iter().all(fine) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

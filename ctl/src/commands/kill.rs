use crate::connect::{connect, dirs};
use crate::output::{print_json, result_line};
use anyhow::Result;
use grove_proto::methods::{IdParams, Kill, Wait, WaitParams};
use std::process::ExitCode;

pub fn run(id: &str, no_wait: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let record = client.call::<Kill>(&IdParams { id: id.into() })?;
    let record = if no_wait {
        record
    } else {
        let mut done = client
            .call::<Wait>(&WaitParams {
                ids: vec![record.id.clone()],
                mode: Default::default(),
                until: Default::default(),
            })?
            .agents;
        if done.is_empty() {
            record
        } else {
            done.remove(0)
        }
    };
    if json {
        print_json(&record)?;
    } else if no_wait {
        println!("{}: stopping", record.id);
    } else {
        println!("{}", result_line(&record));
    }
    Ok(ExitCode::SUCCESS)
}

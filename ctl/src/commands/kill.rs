use crate::connect::{connect, dirs};
use crate::output::{print_json, result_line};
use anyhow::Result;
use grove_proto::methods::{Get, IdParams, Kill, Wait, WaitParams};
use grove_proto::types::AgentRecord;
use std::process::ExitCode;

/// Kills each agent named, then (unless `no_wait`) waits until all are collected. Every
/// id is looked up first: one that matches nothing stops the command before any agent
/// is killed.
pub fn run(ids: &[String], no_wait: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let mut full = Vec::with_capacity(ids.len());
    for id in ids {
        full.push(client.call::<Get>(&IdParams { id: id.clone() })?.id);
    }
    let mut records = Vec::with_capacity(full.len());
    for id in &full {
        records.push(client.call::<Kill>(&IdParams { id: id.clone() })?);
    }
    if !no_wait {
        let done = client
            .call::<Wait>(&WaitParams {
                ids: full,
                mode: Default::default(),
                until: Default::default(),
                timeout_ms: None,
            })?
            .agents;
        if done.len() == records.len() {
            records = done;
        }
    }
    print(&records, no_wait, json)?;
    Ok(ExitCode::SUCCESS)
}

/// One agent: its record (as before several could be named); several: `{"agents"}`.
fn print(records: &[AgentRecord], no_wait: bool, json: bool) -> Result<()> {
    if json {
        match records {
            [one] => print_json(one)?,
            all => print_json(&serde_json::json!({ "agents": all }))?,
        }
        return Ok(());
    }
    for record in records {
        if no_wait {
            println!("{}: stopping", record.id);
        } else {
            println!("{}", result_line(record));
        }
    }
    Ok(())
}

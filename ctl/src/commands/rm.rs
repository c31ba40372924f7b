use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::Result;
use grove_proto::methods::{IdParams, Remove};
use std::process::ExitCode;

pub fn run(id: &str, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Remove>(&IdParams { id: id.into() })?;
    if json {
        print_json(&record)?;
    } else if record.branch_exists {
        println!(
            "removed {}; its work is on {}",
            record.worktree.display(),
            record.branch
        );
    } else {
        println!("removed {} (it held no work)", record.worktree.display());
    }
    Ok(ExitCode::SUCCESS)
}

use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::Result;
use grove_proto::methods::{IdParams, Pause, Resume};
use std::process::ExitCode;

/// `grove pause ID` (`frozen`) and `grove resume ID`.
pub fn run(id: &str, frozen: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let params = IdParams { id: id.into() };
    let record = if frozen {
        client.call::<Pause>(&params)?
    } else {
        client.call::<Resume>(&params)?
    };
    if json {
        print_json(&record)?;
    } else {
        println!("{}: {}", record.id, record.status);
    }
    Ok(ExitCode::SUCCESS)
}

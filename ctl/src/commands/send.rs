//! `grove send` (type into an agent's terminal or open stdin) and `grove status`
//! (an agent says whether it waits for input).

use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::{Context, Result};
use grove_proto::methods::{attach, ActivityParams, Send, SendParams, SetActivity};
use std::io::Read;
use std::process::ExitCode;

pub fn run(id: &str, text: Vec<String>, enter: bool, stdin: bool, json: bool) -> Result<ExitCode> {
    let data = if stdin {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("reading the text from standard input")?;
        Some(attach::encode(&bytes))
    } else {
        None
    };
    let params = SendParams {
        id: id.into(),
        text: (!stdin && !text.is_empty()).then(|| text.join(" ")),
        data,
        enter,
    };
    let sent = connect(&dirs()?)?.call::<Send>(&params)?;
    if json {
        print_json(&sent)?;
    } else {
        println!("{}: sent {} bytes", sent.id, sent.bytes);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status(activity: &str, id: Option<String>, json: bool) -> Result<ExitCode> {
    let params = ActivityParams {
        id,
        activity: activity.into(),
    };
    let record = connect(&dirs()?)?.call::<SetActivity>(&params)?;
    if json {
        print_json(&record)?;
    } else {
        println!("{}: {}", record.id, record.status_text());
    }
    Ok(ExitCode::SUCCESS)
}

use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::Result;
use grove_proto::methods::{Report, ReportParams};
use std::io::Read;
use std::process::ExitCode;

pub fn run(text: &str, id: Option<String>, json: bool) -> Result<ExitCode> {
    let text = if text == "-" {
        let mut all = String::new();
        std::io::stdin().read_to_string(&mut all)?;
        all
    } else {
        text.to_string()
    };
    let record = connect(&dirs()?)?.call::<Report>(&ReportParams {
        text,
        id,
        token: std::env::var("GROVE_TOKEN").ok().filter(|t| !t.is_empty()),
    })?;
    if json {
        print_json(&record)?;
    } else {
        println!("report saved for agent {}", record.id);
    }
    Ok(ExitCode::SUCCESS)
}

//! `grove screen`: an agent's terminal as it looks now.

use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::Result;
use grove_proto::methods::{Screen, ScreenParams};
use std::io::Write;
use std::process::ExitCode;

pub fn run(id: &str, ansi: bool, json: bool) -> Result<ExitCode> {
    let screen = connect(&dirs()?)?.call::<Screen>(&ScreenParams {
        id: id.into(),
        ansi,
    })?;
    if json {
        print_json(&screen)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(screen.text.as_bytes())?;
    if !screen.text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

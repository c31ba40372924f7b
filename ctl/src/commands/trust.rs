use crate::connect::{connect, dirs};
use crate::output::print_json;
use anyhow::{Context, Result};
use grove_proto::methods::{Trust, TrustParams};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(repo: Option<PathBuf>, revoke: bool, json: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let repo = repo.map(|p| cwd.join(p)).unwrap_or(cwd);
    let answer = connect(&dirs()?)?.call::<Trust>(&TrustParams { repo, revoke })?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let file = answer.file.display();
    if revoke {
        if answer.revoked {
            println!("{file}: approval withdrawn; its setup commands will not run");
        } else {
            println!("{file} was not approved; nothing changed");
        }
    } else if answer.setup.is_empty() {
        println!("{file} approved (it has no setup commands)");
    } else {
        println!("{file} approved; these setup commands will run before every agent:");
        for command in &answer.setup {
            println!("  $ {command}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

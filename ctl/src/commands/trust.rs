use crate::connect::{connect, dirs};
use crate::output::{print_json, safe, safe_path};
use anyhow::{Context, Result};
use grove_proto::methods::{Trust, TrustParams};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(repo: Option<PathBuf>, revoke: bool, json: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let repo = repo.map(|p| cwd.join(p)).unwrap_or(cwd);
    let mut client = connect(&dirs()?)?;
    let params = |preview, sha256| TrustParams {
        repo: repo.clone(),
        revoke,
        preview,
        sha256,
    };
    if revoke {
        let answer = client.call::<Trust>(&params(false, None))?;
        if json {
            print_json(&answer)?;
        } else if answer.revoked {
            println!(
                "{}: approval withdrawn; its setup commands will not run",
                safe_path(&answer.file)
            );
        } else {
            println!(
                "{} was not approved; nothing changed",
                safe_path(&answer.file)
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // What is approved is what is printed here: the daemon approves only the content
    // with the hash of the preview shown, and refuses if the file changed meanwhile.
    let shown = client.call::<Trust>(&params(true, None))?;
    let file = safe_path(&shown.file);
    if !json {
        if shown.setup.is_empty() {
            println!("{file} has no setup commands");
        } else {
            println!("{file}: these setup commands will run before every agent:");
            for command in &shown.setup {
                println!("  $ {}", safe(command));
            }
        }
        if let Some(sha256) = &shown.sha256 {
            println!("sha256 {sha256}");
        }
    }
    let answer = client.call::<Trust>(&params(false, shown.sha256.clone()))?;
    if json {
        print_json(&answer)?;
    } else {
        println!("{file} approved");
    }
    Ok(ExitCode::SUCCESS)
}

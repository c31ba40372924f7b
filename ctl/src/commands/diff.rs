use crate::connect::{connect, dirs};
use anyhow::{Context, Result};
use grove_proto::methods::{Get, IdParams};
use std::process::{Command, ExitCode};

/// Runs `git diff <base>...<branch>` in the repository: the output is git's own, with
/// its pager and colours on a terminal.
pub fn run(id: &str, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    if !record.branch_exists {
        if !json {
            eprintln!(
                "grove: agent {} left no commits beyond its base; its branch was removed",
                record.id
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut git = Command::new("git");
    git.arg("-C").arg(&record.repo).arg("diff");
    if json {
        git.arg("--no-color");
    }
    let status = git
        .arg(format!("{}...{}", record.base_commit, record.branch))
        .arg("--")
        .status()
        .context("running git diff")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

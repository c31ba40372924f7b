use crate::connect::{connect, dirs};
use crate::gitcli::Work;
use crate::output::{print_json, print_json_or};
use anyhow::{Context, Result};
use grove_proto::methods::{Diff, DiffParams, Get, IdParams};
use serde::Serialize;
use std::io::IsTerminal;
use std::process::{Command, ExitCode};

/// Runs `git diff <base>...<branch>` (the branch against its merge-base with the base) in
/// the repository: git's own output, with its pager and colours on a terminal. A live
/// agent's diff comes from the daemon: its worktree as it is now, against its base.
pub fn run(id: &str, stat: bool, paths: &[String], json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let record = client.call::<Get>(&IdParams { id: id.into() })?;
    let id = record.id.clone();
    if !record.status.is_final() {
        // Still at work: the daemon reads its worktree as it is now (agent.diff).
        let live = client.call::<Diff>(&DiffParams {
            id: id.clone(),
            stat,
            paths: paths.to_vec(),
        })?;
        return print_json_or(json, &live, |live| print!("{}", live.diff));
    }
    let Some(work) = Work::load(record)? else {
        eprintln!(
            "grove: agent {id} has no branch: it left no commits beyond its base, or its branch was deleted"
        );
        return Ok(ExitCode::SUCCESS);
    };
    // Pathspecs are relative to where the user stands when that is inside the repository.
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let dir = if cwd.starts_with(&work.record.repo) {
        cwd
    } else {
        work.record.repo.clone()
    };
    let tty = !json && std::io::stdout().is_terminal();
    let mut git = Command::new("git");
    git.arg("-C").arg(&dir);
    if !tty {
        git.arg("--no-pager");
    }
    git.arg("diff");
    if !tty {
        git.arg("--no-color");
    }
    if stat {
        git.arg("--stat");
    }
    let range = format!("{}...{}", work.base, work.record.branch);
    git.arg(&range).arg("--").args(paths);
    if !json {
        let status = git.status().context("running git diff")?;
        return Ok(match status.code() {
            Some(0) => ExitCode::SUCCESS,
            _ => ExitCode::from(1),
        });
    }
    let out = git.output().context("running git diff")?;
    if !out.status.success() {
        anyhow::bail!(
            "git diff {range} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    #[derive(Serialize)]
    struct DiffJson {
        id: String,
        branch: String,
        base: String,
        merge_base: String,
        diff: String,
    }
    print_json(&DiffJson {
        id,
        branch: work.record.branch.clone(),
        base: work.base_label(),
        merge_base: work.merge_base.clone(),
        diff: String::from_utf8_lossy(&out.stdout).into_owned(),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A finished agent's branch against its merge-base with the base, as plain text (no
/// colour, no pager); a sentence when it left no branch.
pub fn finished(record: grove_proto::types::AgentRecord) -> Result<String> {
    let id = record.id.clone();
    let Some(work) = Work::load(record)? else {
        return Ok(format!(
            "agent {id} has no branch: it left no commits beyond its base, or its branch was deleted"
        ));
    };
    let range = format!("{}...{}", work.base, work.record.branch);
    let out = Command::new("git")
        .arg("-C")
        .arg(&work.record.repo)
        .args(["--no-pager", "diff", "--no-color", &range])
        .output()
        .context("running git diff")?;
    if !out.status.success() {
        anyhow::bail!(
            "git diff {range} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

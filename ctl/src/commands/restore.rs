use crate::connect::{connect, dirs};
use crate::output::{print_json_or, safe, safe_path};
use anyhow::{Context, Result};
use grove_proto::methods::{Restore, RestoreParams};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(reference: &str, repo: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let repo = repo.map(|p| cwd.join(p)).unwrap_or(cwd);
    let restored = connect(&dirs()?)?.call::<Restore>(&RestoreParams {
        repo,
        reference: reference.into(),
    })?;
    print_json_or(json, &restored, |restored| {
        println!(
            "restored on branch {} in {} (tracked as {}: `grove diff {}`, `grove merge {}`, \
             `grove rm {}` salvages and removes it)",
            safe(&restored.branch),
            safe_path(&restored.worktree),
            safe(&restored.id),
            safe(&restored.id),
            safe(&restored.id),
            safe(&restored.id)
        );
    })
}

//! `grove agents`, and resolving `spawn --agent NAME` into an argv: in the client, so
//! that the command, its PATH lookup and the files read are the caller's.

use crate::connect::dirs;
use crate::exit::UsageError;
use crate::output::{print_json, table};
use anyhow::{Context, Result};
use grove_daemon::presets::{self, Preset};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(json: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let (all, shadowed) = load(&cwd)?;
    if json {
        print_json(&serde_json::json!({ "agents": all, "shadowed": shadowed }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows = all
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.source.clone(),
                p.command.join(" "),
                p.headless.as_ref().map(|h| h.join(" ")).unwrap_or_default(),
                if p.tty { "yes" } else { "" }.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["NAME", "SOURCE", "COMMAND", "HEADLESS", "TTY"], rows)
    );
    for p in &shadowed {
        eprintln!(
            "note: {} defines `{}`, which is already a built-in or config.toml preset; \
             a repository's preset never replaces one you know: rename it there",
            p.source, p.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `spawn --agent` runs: the argv, whether it wants a terminal, its variables.
pub struct Resolved {
    pub argv: Vec<String>,
    pub tty: bool,
    pub env: Vec<(String, String)>,
    pub jail_home: Vec<String>,
    pub cli_files: Vec<String>,
}

pub fn resolve(name: &str, headless: bool, prompt: Option<&str>, repo: &Path) -> Result<Resolved> {
    let (all, _) = load(repo)?;
    let Some(preset) = all.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        return Err(UsageError(format!(
            "no agent preset `{name}`; known: {} (`grove agents` shows them; define more \
             as [agents.NAME] in config.toml or .grove.toml)",
            names.join(", ")
        ))
        .into());
    };
    let argv = presets::render(preset, headless, prompt).map_err(UsageError)?;
    Ok(Resolved {
        argv,
        tty: preset.tty,
        env: preset
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        jail_home: preset.jail_home.clone(),
        cli_files: preset.cli_files.clone(),
    })
}

/// Built-ins, the user's config.toml and the `.grove.toml` of the repository `from` is in.
fn load(from: &Path) -> Result<(Vec<Preset>, Vec<Preset>)> {
    let user = match read(&dirs()?.config_file)? {
        Some((text, origin)) => presets::parse(&text, &origin).map_err(UsageError)?,
        None => Vec::new(),
    };
    let repo = match toplevel(from).map(|top| read(&top.join(".grove.toml"))) {
        Some(found) => match found? {
            Some((text, origin)) => presets::parse(&text, &origin).map_err(UsageError)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    Ok(presets::merge(user, repo))
}

fn read(path: &Path) -> Result<Option<(String, String)>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some((text, path.display().to_string()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The top of the worktree `dir` is in: the nearest directory holding `.git`.
fn toplevel(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

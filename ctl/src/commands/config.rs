//! `grove config`: the effective configuration, as a daemon started from this shell
//! would see it, with where each value came from. Every setting is in docs/config.md.

use crate::log_file::RotatingFile;
use crate::output::{cell, print_json_or, table, Tone};
use anyhow::Result;
use comfy_table::Cell;
use grove_daemon::config::{Source, SETTINGS};
use grove_daemon::Config;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Serialize)]
struct Setting {
    key: String,
    value: String,
    /// `default`, `file` or `environment`.
    source: &'static str,
    /// The file or the variable the value came from; null for defaults.
    from: Option<String>,
    /// The variable that sets it.
    variable: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct Effective {
    config_file: PathBuf,
    config_file_exists: bool,
    settings: Vec<Setting>,
    /// The daemon that runs now, if one does, and the settings it uses otherwise.
    running_daemon: Option<Running>,
}

/// A running daemon reads its settings at its start only.
#[derive(Debug, Serialize)]
struct Running {
    pid: u32,
    /// Settings whose value differs between the running daemon and this shell's view.
    differs: Vec<Differs>,
}

#[derive(Debug, Serialize)]
struct Differs {
    key: String,
    running: String,
    now: String,
}

pub fn run(json: bool) -> Result<ExitCode> {
    let config = Config::from_env()?;
    let settings = settings(&config);
    let effective = Effective {
        config_file: config.dirs.config_file.clone(),
        config_file_exists: config.dirs.config_file.exists(),
        running_daemon: running(&config, &settings),
        settings,
    };
    print_json_or(json, &effective, |effective| {
        let rows = effective
            .settings
            .iter()
            .map(|s| {
                let source = match (&s.source, &s.from) {
                    (&"file", Some(path)) => format!("file {path}"),
                    (&"environment", Some(var)) => format!("env {var}"),
                    (source, _) => source.to_string(),
                };
                let tone = if s.source == "default" {
                    Some(Tone::Dim)
                } else {
                    Some(Tone::Busy)
                };
                vec![Cell::new(&s.key), Cell::new(&s.value), cell(source, tone)]
            })
            .collect();
        println!("{}", table(&["SETTING", "VALUE", "SOURCE"], rows));
        println!(
            "config file: {}{}",
            effective.config_file.display(),
            if effective.config_file_exists {
                ""
            } else {
                " (none)"
            }
        );
        if let Some(running) = effective
            .running_daemon
            .as_ref()
            .filter(|r| !r.differs.is_empty())
        {
            let changes: Vec<String> = running
                .differs
                .iter()
                .map(|d| format!("{} {} (now {})", d.key, d.running, d.now))
                .collect();
            eprintln!(
                "note: the running daemon (pid {}) uses the settings it read at its start: {}; \
                 `grove daemon reload` applies these (running agents keep running)",
                running.pid,
                changes.join(", ")
            );
        }
    })
}

/// What `grove daemon reload` would change: the running daemon's pid and its settings
/// that differ from this shell's view; None when no daemon answers. A config that
/// cannot be read is the error, and nothing is changed.
pub(crate) fn pending_changes() -> Result<Option<(u32, Vec<String>)>> {
    let config = Config::from_env()?;
    let settings = settings(&config);
    Ok(running(&config, &settings).map(|running| {
        let changes = running
            .differs
            .iter()
            .map(|d| format!("{} {} -> {}", d.key, d.running, d.now))
            .collect();
        (running.pid, changes)
    }))
}

/// The running daemon's settings against `settings`; none when no daemon answers
/// (this command never starts one).
fn running(config: &Config, settings: &[Setting]) -> Option<Running> {
    let mut client = crate::connect::connect_existing(&config.dirs).ok()?;
    let status = client
        .call::<grove_proto::methods::DaemonStatus>(&grove_proto::methods::Empty {})
        .ok()?;
    let differs = settings
        .iter()
        .filter_map(|s| {
            let running = status.settings.get(&s.key)?;
            (running != &s.value).then(|| Differs {
                key: s.key.clone(),
                running: running.clone(),
                now: s.value.clone(),
            })
        })
        .collect();
    Some(Running {
        pid: status.pid,
        differs,
    })
}

fn settings(config: &Config) -> Vec<Setting> {
    let mut out = Vec::new();
    for (key, variable, _) in SETTINGS {
        let (source, from) = match config.sources.get(key) {
            Some(Source::File(path)) => ("file", Some(path.display().to_string())),
            Some(Source::Environment(var)) => ("environment", Some(var.clone())),
            Some(Source::Default) | None => ("default", None),
        };
        out.push(Setting {
            key: key.to_string(),
            value: grove_daemon::config::value_text(config, key),
            source,
            from,
            variable: Some(*variable),
        });
    }
    out.extend(paths(config));
    let log = std::env::var("GROVE_LOG").ok().filter(|v| !v.is_empty());
    out.push(Setting {
        key: "log".into(),
        value: log.clone().unwrap_or_else(|| "info".into()),
        source: if log.is_some() {
            "environment"
        } else {
            "default"
        },
        from: log.map(|_| "GROVE_LOG".into()),
        variable: Some("GROVE_LOG"),
    });
    let max = RotatingFile::max_bytes_from_env();
    let from_env = std::env::var("GROVE_LOG_MAX_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    out.push(Setting {
        key: "log_max_bytes".into(),
        value: max.to_string(),
        source: if from_env { "environment" } else { "default" },
        from: from_env.then(|| "GROVE_LOG_MAX_BYTES".into()),
        variable: Some("GROVE_LOG_MAX_BYTES"),
    });
    out
}

/// The variable among `vars` that is set (and not empty), if any.
fn set_var(vars: &[&'static str]) -> Option<&'static str> {
    vars.iter()
        .copied()
        .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

fn path_setting(key: &str, value: &Path, vars: &[&'static str]) -> Setting {
    let from = set_var(vars);
    Setting {
        key: key.into(),
        value: value.display().to_string(),
        source: if from.is_some() {
            "environment"
        } else {
            "default"
        },
        from: from.map(String::from),
        variable: vars.first().copied(),
    }
}

fn paths(config: &Config) -> Vec<Setting> {
    let dirs = &config.dirs;
    let home = std::env::var_os("GROVE_HOME").is_some_and(|v| !v.is_empty());
    let pick = |home_var: &'static str, xdg: &'static str| -> Vec<&'static str> {
        if home {
            vec![home_var]
        } else {
            vec![xdg]
        }
    };
    vec![
        path_setting(
            "state_dir",
            &dirs.state_dir,
            &pick("GROVE_HOME", "XDG_STATE_HOME"),
        ),
        path_setting(
            "socket",
            &dirs.socket,
            // The socket lives in the state directory, whatever else is set.
            &pick("GROVE_HOME", "XDG_STATE_HOME"),
        ),
        path_setting("worktree_root", &dirs.worktree_root, &{
            let mut vars = vec!["GROVE_WORKTREE_ROOT"];
            vars.extend(pick("GROVE_HOME", "XDG_DATA_HOME"));
            vars
        }),
        path_setting(
            "config_file",
            &dirs.config_file,
            &pick("GROVE_HOME", "XDG_CONFIG_HOME"),
        ),
    ]
}

//! `grove doctor`: what grove needs from this machine, checked and explained.
//! Each check says ok, warn or fail in one line; only a failure makes the exit code 1.
//! It never starts a daemon.

use crate::connect::connect_existing;
use crate::exit::AGENT_FAILED;
use crate::output::{bytes, paint, print_json, Tone};
use anyhow::Result;
use grove_agent_shim::{ShimProgram, SHIM_ARG};
use grove_proto::methods::{CgroupProbe, DaemonMetrics, DaemonProbe, Empty, JailProbe};
use grove_proto::paths::{Dirs, PathError, MAX_SOCKET_PATH_BYTES};
use grove_proto::ClientError;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `git worktree add --reason` (worktrees locked with a reason) came with git 2.31.
const GIT_MIN: (u32, u32) = (2, 31);

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Level,
    pub message: String,
    /// Facts behind the message, for programs (the ABI number, the usage...).
    pub data: Value,
    /// Lines printed below the message (in `--json`, the same facts are in `data`).
    #[serde(skip)]
    pub details: Vec<String>,
}

fn check(name: &'static str, status: Level, message: impl Into<String>, data: Value) -> Check {
    Check {
        name,
        status,
        message: message.into(),
        data,
        details: Vec::new(),
    }
}

#[derive(Serialize)]
struct Report {
    ok: bool,
    checks: Vec<Check>,
}

pub fn run(json: bool) -> Result<ExitCode> {
    let checks = checks();
    let ok = checks.iter().all(|c| c.status != Level::Fail);
    if json {
        print_json(&Report { ok, checks })?;
    } else {
        let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &checks {
            let (word, tone) = match c.status {
                Level::Ok => ("ok", Tone::Good),
                Level::Warn => ("warn", Tone::Warn),
                Level::Fail => ("fail", Tone::Bad),
            };
            // Pad outside the colour codes so that the columns line up.
            println!(
                "{}{}  {:<width$}  {}",
                paint(word, Some(tone)),
                " ".repeat(4 - word.len()),
                c.name,
                c.message
            );
            for line in &c.details {
                println!("{}  {line}", " ".repeat(4 + 2 + width));
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

pub fn checks() -> Vec<Check> {
    let dirs = Dirs::from_env();
    let config = grove_daemon::Config::from_env();
    let mut checks = vec![git()];
    checks.push(match &dirs {
        Ok(dirs) => socket_ok(&dirs.socket),
        Err(e) => socket_err(e),
    });
    let probe = dirs.as_ref().ok().map(daemon_probe);
    let local = || Probed {
        found: grove_daemon::jail_probe(),
        by: By::Doctor,
    };
    checks.push(landlock(match &probe {
        Some(Ok(probe)) => Probed {
            found: probe.jail.clone(),
            by: By::Daemon,
        },
        _ => local(),
    }));
    checks.push(match &probe {
        Some(Ok(probe)) => cgroup(&probe.cgroup),
        Some(Err(why)) => cgroup_unchecked(why),
        None => cgroup_unchecked("grove cannot find its directories (see the socket check)"),
    });
    checks.push(shim());
    match (&dirs, &config) {
        (Ok(_), Ok(config)) => {
            checks.push(check(
                "config",
                Level::Ok,
                if config.dirs.config_file.exists() {
                    format!(
                        "{} is valid (`grove config` shows every value)",
                        config.dirs.config_file.display()
                    )
                } else {
                    format!(
                        "defaults and environment (no {}); `grove config` shows every value",
                        config.dirs.config_file.display()
                    )
                },
                json!({ "file": config.dirs.config_file }),
            ));
            checks.push(disk(
                &config.dirs.worktree_root,
                config.disk_high,
                config.disk_low,
            ));
            checks.push(checkouts(&config.dirs.worktree_root));
            checks.push(database(&config.dirs.database()));
            checks.push(daemon(&config.dirs));
            checks.extend(slos(&config.dirs));
        }
        (Ok(dirs), Err(e)) => {
            checks.push(check("config", Level::Fail, e.to_string(), Value::Null));
            checks.push(database(&dirs.database()));
            checks.push(daemon(dirs));
        }
        (Err(_), _) => {
            for name in ["config", "disk", "database", "daemon"] {
                checks.push(check(
                    name,
                    Level::Warn,
                    "not checked: grove cannot find its directories (see the socket check)",
                    Value::Null,
                ));
            }
        }
    }
    checks
}

/// The shim binary next to this grove. Without it agents still run, each held by a whole
/// `grove __shim`, which takes more memory per agent.
fn shim() -> Check {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            return check(
                "shim",
                Level::Warn,
                format!("cannot find the grove executable: {e}"),
                Value::Null,
            )
        }
    };
    match ShimProgram::for_exe(&exe) {
        ShimProgram::Separate(path) => check(
            "shim",
            Level::Ok,
            format!("{} holds each agent", path.display()),
            json!({ "path": path, "separate": true }),
        ),
        ShimProgram::Fallback { exe, missing } => check(
            "shim",
            Level::Warn,
            format!(
                "no {}: agents are held by `{} {SHIM_ARG}`, which takes more memory each; \
                 install both binaries (`cargo install --path ctl`)",
                missing.display(),
                exe.display()
            ),
            json!({ "path": exe, "separate": false, "missing": missing }),
        ),
    }
}

/// "git version 2.39.5" -> (2, 39, 5).
fn parse_git_version(text: &str) -> Option<(u32, u32, u32)> {
    let version = text
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

fn git() -> Check {
    let output = std::process::Command::new("git").arg("--version").output();
    let text = match output {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            return check(
                "git",
                Level::Fail,
                format!(
                    "`git --version` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Value::Null,
            )
        }
        Err(e) => {
            return check(
                "git",
                Level::Fail,
                format!(
                    "cannot run git ({e}): grove needs git {}.{} or newer on PATH",
                    GIT_MIN.0, GIT_MIN.1
                ),
                Value::Null,
            )
        }
    };
    match parse_git_version(&text) {
        Some((major, minor, patch)) => {
            let data = json!({ "version": format!("{major}.{minor}.{patch}") });
            if (major, minor) >= GIT_MIN {
                check(
                    "git",
                    Level::Ok,
                    format!(
                        "git {major}.{minor}.{patch} ({}.{} or newer is needed for `worktree add --reason`)",
                        GIT_MIN.0, GIT_MIN.1
                    ),
                    data,
                )
            } else {
                check(
                    "git",
                    Level::Fail,
                    format!(
                        "git {major}.{minor}.{patch} is too old: grove needs {}.{} or newer for `worktree add --reason`",
                        GIT_MIN.0, GIT_MIN.1
                    ),
                    data,
                )
            }
        }
        None => check(
            "git",
            Level::Warn,
            format!("cannot read the version in {text:?}"),
            Value::Null,
        ),
    }
}

fn socket_ok(path: &Path) -> Check {
    let len = path.as_os_str().len();
    if let Some(dir) = path.parent() {
        if let Some(why) = unsafe_socket_dir(dir) {
            return check(
                "socket",
                Level::Fail,
                why,
                json!({ "path": path, "dir": dir, "safe_dir": false }),
            );
        }
    }
    check(
        "socket",
        Level::Ok,
        format!(
            "{}: {len} bytes (Unix sockets allow {MAX_SOCKET_PATH_BYTES})",
            path.display()
        ),
        json!({ "path": path, "bytes": len, "max_bytes": MAX_SOCKET_PATH_BYTES }),
    )
}

/// What the daemon and every client would refuse about the socket's directory (the
/// same rules as `grove_proto::paths::secure_socket_dir`, read-only here: doctor
/// changes nothing).
fn unsafe_socket_dir(dir: &Path) -> Option<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(_) => return None,
    };
    let shown = dir.display();
    if meta.file_type().is_symlink() {
        return Some(format!(
            "the socket directory {shown} is a symbolic link; grove refuses it: remove it"
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!(
            "the socket directory {shown} belongs to uid {}, not to you (uid {me}); grove \
             refuses it: remove it, or set GROVE_HOME elsewhere",
            meta.uid()
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Some(format!(
            "others may write the socket directory {shown} (mode {:o}); grove refuses it: \
             chmod 700 {shown}",
            meta.permissions().mode() & 0o777
        ));
    }
    None
}

fn socket_err(error: &PathError) -> Check {
    match error {
        PathError::SocketPathTooLong { path, len, max } => check(
            "socket",
            Level::Fail,
            format!(
                "{path}: {len} bytes, over the {max}-byte limit of Unix sockets; set GROVE_HOME \
                 to a shorter directory"
            ),
            json!({ "path": path, "bytes": len, "max_bytes": max }),
        ),
        other => check("socket", Level::Fail, other.to_string(), Value::Null),
    }
}

/// Who ran a probe: the daemon (where agents run) or, with no daemon, doctor itself.
#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum By {
    Daemon,
    Doctor,
}

struct Probed<T> {
    found: T,
    by: By,
}

/// The subsystems' probes as the running daemon runs them (`daemon.probe`), or why
/// there are none.
fn daemon_probe(dirs: &Dirs) -> Result<grove_proto::methods::ProbeResult, String> {
    match connect_existing(dirs).and_then(|mut c| c.call::<DaemonProbe>(&Empty {})) {
        Ok(probe) => Ok(probe),
        Err(ClientError::Unreachable { .. }) => Err("the daemon is not running".into()),
        Err(e) => Err(format!("the daemon did not answer `daemon.probe` ({e})")),
    }
}

/// The jail line: the probe a jailed spawn runs, in the daemon when one runs (Landlock
/// is the kernel's, the cgroup the daemon's), so that doctor never says "ok" where
/// `--jail` would be refused.
fn landlock(probed: Probed<JailProbe>) -> Check {
    let probe = probed.found;
    let data = json!({
        "supported": probe.refusal.is_none(),
        "abi": probe.abi,
        "required_abi": probe.required_abi,
        "cgroup": probe.cgroup,
        "probed_by": probed.by,
        "guarantees": probe.guarantees,
    });
    let details = probe
        .guarantees
        .iter()
        .map(|g| {
            let mark = if g.holds { "yes" } else { "no " };
            format!("{mark}  {} ({})", g.guarantee, g.rests_on)
        })
        .collect();
    let mut jail = match probe.refusal {
        None => check(
            "jail",
            Level::Ok,
            format!(
                "Landlock ABI {} (needs {}) and a cgroup per agent: `--jail` holds agents to \
                 their worktree",
                probe.abi, probe.required_abi
            ),
            data,
        ),
        Some(why) => check("jail", Level::Warn, why, data),
    };
    jail.details = details;
    jail
}

/// The cgroup line: the cgroup an agent gets, made by the daemon below its own.
fn cgroup(probe: &CgroupProbe) -> Check {
    let mut data = json!(probe);
    data["probed_by"] = json!(By::Daemon);
    let daemon_cgroup = probe
        .daemon_cgroup
        .as_deref()
        .unwrap_or("an unknown cgroup");
    let Some(mount) = &probe.mount_point else {
        return check(
            "cgroup v2",
            Level::Warn,
            "no cgroup2 filesystem is mounted: no per-agent resource accounting through cgroups \
             (rlimits still apply)",
            data,
        );
    };
    if probe.agent_cgroup {
        // Without its own cgroup known, the shim's fall back to the mount's root.
        let below = match &probe.daemon_cgroup {
            Some(own) => mount.join(own.trim_start_matches('/')),
            None => mount.clone(),
        };
        check(
            "cgroup v2",
            Level::Ok,
            format!(
                "the daemon made an agent's cgroup below its own ({}) and moved a process \
                 into it: each agent's tree is accounted and ended as one",
                below.display()
            ),
            data,
        )
    } else {
        check(
            "cgroup v2",
            Level::Warn,
            format!(
                "mounted at {}{}, but the daemon (in {daemon_cgroup}) cannot make an agent's \
                 cgroup below its own and move a process into it: no per-agent resource \
                 accounting through cgroups (rlimits still apply); start the daemon where it \
                 has a writable, delegated cgroup",
                mount.display(),
                if probe.read_write { "" } else { " read-only" }
            ),
            data,
        )
    }
}

/// Agents' cgroups go below the daemon's, not this shell's: without the daemon's
/// answer, doctor says so rather than probe the wrong place.
fn cgroup_unchecked(why: &str) -> Check {
    check(
        "cgroup v2",
        Level::Warn,
        format!(
            "not checked: {why}; agents' cgroups go below the daemon's, so the daemon probes \
             them (any grove command starts it, then run doctor again)"
        ),
        json!({ "probed_by": null, "why": why }),
    )
}

fn disk(root: &Path, high: f64, low: f64) -> Check {
    let grove_daemon::DiskUsage {
        measured: probe,
        used: usage,
        free_bytes,
        size_bytes,
    } = match grove_daemon::measure_disk(root) {
        Ok(disk) => disk,
        Err(e) => {
            return check(
                "disk",
                Level::Fail,
                format!("cannot measure the filesystem of {}: {e}", root.display()),
                Value::Null,
            )
        }
    };
    let pct = |f: f64| format!("{:.0}%", f * 100.0);
    let message = format!(
        "{} used of {} ({} free) holding {}; cleanup starts over {} and aims for {}",
        pct(usage),
        bytes(size_bytes),
        bytes(free_bytes),
        root.display(),
        pct(high),
        pct(low)
    );
    let data = json!({
        "path": root,
        "measured": probe,
        "used_percent": (usage * 1000.0).round() / 10.0,
        "free_bytes": free_bytes,
        "size_bytes": size_bytes,
        "disk_high_percent": (high * 100.0).round(),
        "disk_low_percent": (low * 100.0).round(),
    });
    if usage > high {
        check(
            "disk",
            Level::Fail,
            format!("{message}: over the limit, so spawns are refused until cleanup frees space"),
            data,
        )
    } else if usage > high - 0.1 {
        check(
            "disk",
            Level::Warn,
            format!("{message}: close to the limit"),
            data,
        )
    } else {
        check("disk", Level::Ok, message, data)
    }
}

/// How agents' checkouts are made under `root`: cloned (copy-on-write) where its
/// filesystem clones files, else checked out file by file.
fn checkouts(root: &Path) -> Check {
    let probed = root.ancestors().find(|dir| dir.is_dir()).unwrap_or(root);
    let cloned = grove_sys::reflink::supported(probed);
    let message = if cloned {
        format!(
            "{} clones files (reflinks): an agent's checkout is cloned from grove's template \
             of its base, copy-on-write, costing almost no disk",
            root.display()
        )
    } else {
        format!(
            "{} cannot clone files (no reflinks): worktrees are checked out file by file; on \
             btrfs or XFS with reflink they would be cloned",
            root.display()
        )
    };
    check(
        "worktrees",
        Level::Ok,
        message,
        json!({ "path": root, "cloned": cloned }),
    )
}

fn database(path: &Path) -> Check {
    if !path.exists() {
        return check(
            "database",
            Level::Ok,
            format!(
                "{} does not exist yet (the daemon creates it)",
                path.display()
            ),
            json!({ "path": path, "exists": false }),
        );
    }
    let repair = format!("To repair it, {}.", grove_daemon::RECOVER_ADVICE);
    let log = settled_log_check(path);
    let wal = match &log {
        Ok(log) => json!({
            "path": log.path,
            "bytes": log.scan.bytes,
            "committed_frames": log.scan.committed,
            "commits": log.scan.commits,
            "damage": log.report(),
        }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    if let Ok(Some(report)) = log.as_ref().map(|log| log.report()) {
        return check(
            "database",
            Level::Fail,
            format!("{report} {repair}"),
            json!({ "path": path, "exists": true, "wal": wal }),
        );
    }
    let result = grove_daemon::database_quick_check(path);
    match result {
        Ok(rows) if rows == ["ok"] => check(
            "database",
            Level::Ok,
            format!("{}: quick_check ok, its log is sound", path.display()),
            json!({ "path": path, "exists": true, "quick_check": rows, "wal": wal }),
        ),
        Ok(rows) => check(
            "database",
            Level::Fail,
            format!("{} {repair}", grove_daemon::pages_report(path, &rows)),
            json!({ "path": path, "exists": true, "quick_check": rows, "wal": wal }),
        ),
        Err(e @ grove_daemon::DbError::Damaged(_)) => check(
            "database",
            Level::Fail,
            format!("{e} {repair}"),
            json!({ "path": path, "exists": true, "error": e.to_string(), "wal": wal }),
        ),
        Err(e) => check(
            "database",
            Level::Fail,
            format!("cannot read it: {e}"),
            json!({ "path": path, "exists": true, "error": e.to_string(), "wal": wal }),
        ),
    }
}

/// The log as SQLite would read it. A running daemon may be writing it: a scan during
/// which the file changed is taken again, so that a frame being written is not called
/// a cut.
fn settled_log_check(db: &Path) -> std::io::Result<grove_daemon::LogCheck> {
    let stamp = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.len(), m.modified().ok()))
    };
    let mut attempts = 0;
    loop {
        let before = stamp(&grove_daemon::wal_path(db));
        let log = grove_daemon::check_database_log(db)?;
        attempts += 1;
        if before == stamp(&log.path) || attempts == 10 {
            return Ok(log);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn daemon(dirs: &Dirs) -> Check {
    let ours = env!("CARGO_PKG_VERSION");
    match connect_existing(dirs).and_then(|mut client| client.hello().cloned()) {
        Ok(hello) => {
            let theirs = &hello.daemon_version;
            let data = json!({
                "running": true,
                "pid": hello.pid,
                "daemon_version": theirs,
                "client_version": ours,
                "protocol": hello.protocol,
            });
            if theirs == ours {
                check(
                    "daemon",
                    Level::Ok,
                    format!("running (pid {}), version {ours}", hello.pid),
                    data,
                )
            } else {
                check(
                    "daemon",
                    Level::Warn,
                    format!(
                        "running (pid {}) version {theirs}, this grove is {ours} (same protocol); \
                         `grove daemon restart` runs this version",
                        hello.pid
                    ),
                    data,
                )
            }
        }
        Err(ClientError::Unreachable { .. }) if daemon_elsewhere(dirs).is_some() => {
            let (pid, sockets) = daemon_elsewhere(dirs).unwrap_or_default();
            let listed: Vec<String> = sockets.iter().map(|p| p.display().to_string()).collect();
            let ours = dirs.socket.display().to_string();
            let why = if listed.is_empty() || listed.contains(&ours) {
                "its socket file was removed or replaced".to_string()
            } else {
                format!(
                    "it listens on {}: a grove with another socket location started it (an \
                     older grove, or one run with other environment variables)",
                    listed.join(", ")
                )
            };
            check(
                "daemon",
                Level::Fail,
                format!(
                    "a daemon (pid {pid}) holds the state directory {} but does not answer on \
                     {ours}: {why}. Commands here cannot reach it and cannot start another: \
                     stop it with `kill {pid}` (its agents keep running), then any grove \
                     command starts one here.",
                    dirs.state_dir.display(),
                ),
                json!({ "running": true, "pid": pid, "socket": ours, "listening_on": listed }),
            )
        }
        Err(ClientError::Unreachable { .. }) => check(
            "daemon",
            Level::Ok,
            "not running; the first command that needs it starts it",
            json!({ "running": false, "client_version": ours }),
        ),
        Err(e) if e.is_protocol_mismatch() => check(
            "daemon",
            Level::Fail,
            format!("a daemon of another protocol version runs ({e}); `grove daemon restart` replaces it"),
            json!({ "running": true, "client_version": ours, "error": e.to_string() }),
        ),
        Err(e) => check(
            "daemon",
            Level::Fail,
            format!("the daemon at {} does not answer properly: {e}", dirs.socket.display()),
            json!({ "running": null, "error": e.to_string() }),
        ),
    }
}

/// A daemon that holds this state directory's lock while our socket is unreachable:
/// its pid (from the lock file) and the Unix sockets it listens on.
fn daemon_elsewhere(dirs: &Dirs) -> Option<(i32, Vec<PathBuf>)> {
    let pid = crate::daemon_lock::lock_holder(&dirs.daemon_lock())? as i32;
    Some((pid, listening_sockets(pid)))
}

fn listening_sockets(pid: i32) -> Vec<PathBuf> {
    grove_sys::proc::listening_unix_sockets(pid as u32)
}

/// One line per service level of a running daemon; a breached one fails.
fn slos(dirs: &Dirs) -> Vec<Check> {
    let Ok(result) = connect_existing(dirs).and_then(|mut c| c.call::<DaemonMetrics>(&Empty {}))
    else {
        return Vec::new();
    };
    result
        .slos
        .iter()
        .map(|s| {
            // Check names are static; doctor runs once and exits, so leaking a few
            // short names costs nothing.
            let name: &'static str = Box::leak(format!("slo {}", s.name).into_boxed_str());
            let (level, word) = if s.breached {
                (Level::Fail, "BREACHED")
            } else {
                (Level::Ok, "met")
            };
            let message = format!(
                "{word}: {} (now {})",
                s.objective,
                super::metrics::measured(s)
            );
            check(name, level, message, json!(s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_versions_parse() {
        assert_eq!(parse_git_version("git version 2.39.5"), Some((2, 39, 5)));
        assert_eq!(
            parse_git_version("git version 2.30.1 (Apple Git-130)"),
            Some((2, 30, 1))
        );
        assert_eq!(parse_git_version("git version 2.45"), Some((2, 45, 0)));
        assert_eq!(parse_git_version("nonsense"), None);
    }
}

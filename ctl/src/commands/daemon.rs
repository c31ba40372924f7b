use crate::cli::DaemonCommand;
use crate::connect::{connect, connect_existing, dirs};
use crate::daemon_lock::{lock_holder, wait_until_gone};
use crate::exit::{AGENT_FAILED, UNREACHABLE};
use crate::output::{age, print_json};
use anyhow::{anyhow, Context, Result};
use grove_proto::methods::{DaemonStatus, DaemonStop, Empty};
use grove_proto::ClientError;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

pub fn run(command: DaemonCommand, json: bool) -> Result<ExitCode> {
    let starts = match command {
        DaemonCommand::Run => Some("`grove daemon run`"),
        DaemonCommand::Restart => Some("`grove daemon restart`"),
        DaemonCommand::Reload => Some("`grove daemon reload`"),
        DaemonCommand::Recover => Some("`grove daemon recover`"),
        DaemonCommand::Install { .. } => Some("`grove daemon install`"),
        DaemonCommand::Status | DaemonCommand::Stop => None,
    };
    if let Some(what) = starts {
        crate::inside_agent::refuse_daemon_start(what)?;
    }
    match command {
        DaemonCommand::Run => {
            crate::daemon_process::run()?;
            Ok(ExitCode::SUCCESS)
        }
        DaemonCommand::Status => status(json),
        DaemonCommand::Stop => stop(json),
        DaemonCommand::Restart => restart(json),
        DaemonCommand::Reload => reload(json),
        DaemonCommand::Recover => recover(json),
        DaemonCommand::Install { enable } => install(enable, json),
    }
}

fn status(json: bool) -> Result<ExitCode> {
    let dirs = dirs()?;
    let mut client = match connect_existing(&dirs) {
        Ok(client) => client,
        Err(ClientError::Unreachable { .. }) => {
            if let Some(pid) = lock_holder(&dirs.daemon_lock()) {
                // Its socket file is gone (deleted under it): it runs, but nobody can
                // reach it. Say so, and how to replace it.
                if json {
                    print_json(&serde_json::json!({
                        "running": true, "reachable": false, "pid": pid, "socket": dirs.socket
                    }))?;
                } else {
                    println!(
                        "grove daemon: running (pid {pid}) but unreachable: its socket {} is \
                         gone; `grove daemon restart` replaces it",
                        dirs.socket.display()
                    );
                }
                return Ok(ExitCode::from(UNREACHABLE));
            }
            if json {
                print_json(&serde_json::json!({ "running": false, "socket": dirs.socket }))?;
            } else {
                println!(
                    "grove daemon: not running (socket {})",
                    dirs.socket.display()
                );
            }
            return Ok(ExitCode::from(UNREACHABLE));
        }
        Err(e) => return Err(e.into()),
    };
    let status = client.call::<DaemonStatus>(&Empty {})?;
    if json {
        let mut value = serde_json::to_value(&status)?;
        value["running"] = true.into();
        print_json(&value)?;
    } else {
        println!("grove daemon: running");
        println!("pid          {}", status.pid);
        println!(
            "version      {} (protocol {})",
            status.daemon_version, status.protocol
        );
        println!("up           {}", age(status.started_at_ms));
        println!("live agents  {}", status.agents_live);
        if status.recovering {
            println!(
                "recovering   yes ({} agents left to roll back or collect)",
                status.recovery_pending
            );
        }
        println!("socket       {}", status.socket.display());
        println!("state        {}", status.state_dir.display());
        println!("worktrees    {}", status.worktree_root.display());
        let ready = status.pool.iter().filter(|p| p.ready).count();
        println!(
            "warm pool    {ready} ready, {} being checked out",
            status.pool.len() - ready
        );
        println!("last prune   {}", when(status.last_prune_ms));
        println!("next prune   {}", when(status.next_prune_ms));
        println!("last GC      {}", when(status.last_session_gc_ms));
        println!("next GC      {}", when(status.next_session_gc_ms));
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the daemon if one runs; returns its pid.
fn stop_daemon(dirs: &grove_proto::paths::Dirs) -> Result<Option<u32>> {
    let mut exited = None;
    let pid = match connect_existing(dirs) {
        Ok(mut client) => {
            let pid = client.hello()?.pid;
            // Opened before the stop, so it names this daemon whatever becomes of its pid.
            exited = grove_sys::pidfd::open(pid).ok();
            client.call::<DaemonStop>(&Empty {})?;
            pid
        }
        // A daemon whose socket file was deleted still holds the lock: the lock's pid
        // is how it is stopped.
        Err(ClientError::Unreachable { .. }) => match lock_holder(&dirs.daemon_lock()) {
            Some(pid) => terminate_by_lock_pid(&dirs.daemon_lock()).map(|_| pid)?,
            None => return Ok(None),
        },
        // A daemon of another version cannot be asked; SIGTERM stops it just as well.
        Err(e) if e.is_protocol_mismatch() => terminate_by_lock_pid(&dirs.daemon_lock())?,
        Err(e) => return Err(e.into()),
    };
    wait_until_gone(&dirs.daemon_lock(), Duration::from_secs(15))?;
    // The lock goes as the process exits, a moment before it has: "stopped" is said
    // once the kernel says it is gone.
    if let Some(pidfd) = exited {
        wait_for_exit(&pidfd, pid)?;
    }
    Ok(Some(pid))
}

/// Returns once the process behind `pidfd` has exited (a pidfd becomes readable then).
fn wait_for_exit(pidfd: &std::os::fd::OwnedFd, pid: u32) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(5_000u16)) {
        Ok(0) => Err(anyhow!(
            "the daemon (pid {pid}) released its lock but did not exit within 5s"
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(anyhow!(
            "cannot wait for the daemon (pid {pid}) to exit: {e}"
        )),
    }
}

fn stop(json: bool) -> Result<ExitCode> {
    let dirs = dirs()?;
    let Some(pid) = stop_daemon(&dirs)? else {
        if json {
            print_json(&serde_json::json!({ "stopped": false, "running": false }))?;
        } else {
            println!("grove daemon: not running");
        }
        return Ok(ExitCode::SUCCESS);
    };
    if json {
        print_json(&serde_json::json!({ "stopped": true, "pid": pid }))?;
    } else {
        println!("grove daemon: stopped (pid {pid}); running agents keep running");
    }
    Ok(ExitCode::SUCCESS)
}

/// Stop, then start through the normal auto-start path; the new daemon adopts the
/// agents that kept running.
fn restart(json: bool) -> Result<ExitCode> {
    let (old, new) = restart_daemon()?;
    if json {
        print_json(&serde_json::json!({ "stopped": old, "pid": new, "running": true }))?;
    } else {
        match old {
            Some(old) => println!("grove daemon: restarted (pid {old} -> {new})"),
            None => println!("grove daemon: was not running; started (pid {new})"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the daemon that runs (if one does) and starts a new one: (old pid, new pid).
fn restart_daemon() -> Result<(Option<u32>, u32)> {
    let dirs = dirs()?;
    let running = connect_existing(&dirs)
        .ok()
        .and_then(|mut c| c.hello().ok().map(|h| h.pid));
    let old = match running {
        // systemd keeps it: let systemd restart it, or it would not supervise the new one.
        Some(pid) if under_systemd(pid) => {
            systemctl(&["--user", "restart", "grove"])?;
            Some(pid)
        }
        _ => stop_daemon(&dirs)?,
    };
    let mut client = connect(&dirs)?;
    Ok((old, client.hello()?.pid))
}

/// Restarts the daemon only when the settings it runs with differ from this shell's
/// view, after checking that view can be read at all: a typo in config.toml stops the
/// reload, not the daemon.
fn reload(json: bool) -> Result<ExitCode> {
    let pending = super::config::pending_changes().context(
        "the configuration cannot be read; the running daemon keeps its settings (fix it, \
         then `grove daemon reload` again)",
    )?;
    let (pid, changes) = match pending {
        Some((pid, changes)) if !changes.is_empty() => (pid, changes),
        Some((pid, _)) => {
            if json {
                print_json(&serde_json::json!({ "reloaded": false, "pid": pid, "changed": [] }))?;
            } else {
                println!(
                    "grove daemon: already runs with these settings (pid {pid}); nothing to do"
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        None => {
            if json {
                print_json(&serde_json::json!({ "reloaded": false, "running": false }))?;
            } else {
                println!("grove daemon: not running; it reads these settings when it starts");
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let (old, new) = restart_daemon()?;
    if json {
        print_json(&serde_json::json!({
            "reloaded": true, "stopped": old.unwrap_or(pid), "pid": new, "changed": changes,
        }))?;
    } else {
        println!(
            "grove daemon: reloaded (pid {} -> {new}): {}; running agents keep running",
            old.unwrap_or(pid),
            changes.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Recovers the database with the daemon's lock held (no daemon may start meanwhile),
/// then starts the daemon through the normal auto-start path: it adopts the agents that
/// kept running, as after any restart.
fn recover(json: bool) -> Result<ExitCode> {
    let dirs = dirs()?;
    let recovered = {
        let _lock = lock_for_recovery(&dirs.daemon_lock())?;
        grove_daemon::recover_database(&dirs.database(), std::time::SystemTime::now())
            .with_context(|| format!("recovering {}", dirs.database().display()))?
    };
    let started = connect(&dirs).and_then(|mut client| Ok(client.hello()?.pid));
    if json {
        print_json(&serde_json::json!({
            "kept": recovered.kept,
            "wal": {
                "path": recovered.log.path,
                "damage": recovered.log.report(),
                "readable_commits": recovered.log.scan.commits,
            },
            "database_problem": recovered.database_problem,
            "tables": recovered.tables.iter().map(|t| serde_json::json!({
                "table": t.table, "rows": t.rows, "incomplete": t.incomplete,
            })).collect::<Vec<_>>(),
            "pid": started.as_ref().ok(),
            "start_error": started.as_ref().err().map(|e| format!("{e:#}")),
        }))?;
    } else {
        print_recovery(&recovered, &dirs.database());
        match &started {
            Ok(pid) => println!(
                "grove daemon: started (pid {pid}) on the recovered database; it adopts the \
                 agents that kept running"
            ),
            Err(e) => eprintln!("grove: error: the daemon did not start: {e:#}"),
        }
    }
    Ok(if started.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

/// Takes the daemon's lock, as a daemon would; refuses while a daemon holds it (its
/// connection would keep writing the files being replaced).
fn lock_for_recovery(lock_path: &Path) -> Result<Flock<File>> {
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    let mut lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
        let pid = lock_holder(lock_path).map_or("?".into(), |p| p.to_string());
        anyhow!(
            "a grove daemon (pid {pid}) has the database open; stop it with `grove daemon \
             stop`, then run `grove daemon recover` again"
        )
    })?;
    // Whoever finds the lock taken is told whose it is, as with a daemon's.
    let _ = lock.set_len(0);
    let _ = write!(lock, "{}", std::process::id());
    Ok(lock)
}

fn print_recovery(recovered: &grove_daemon::Recovered, db: &Path) {
    for copy in &recovered.kept {
        println!("kept         {}", copy.display());
    }
    match recovered.log.report() {
        Some(report) => println!("damage       {report}"),
        None => println!("log          {} was sound", recovered.log.path.display()),
    }
    if let Some(problem) = &recovered.database_problem {
        println!(
            "damage       {} could not be read whole ({problem}); its rows were copied one \
             by one",
            db.display()
        );
    }
    let rows = |name: &str| {
        recovered
            .tables
            .iter()
            .find(|t| t.table == name)
            .map_or(0, |t| t.rows)
    };
    println!(
        "recovered    {} agents, {} sessions, {} checkpoints of shared state",
        rows("agents"),
        rows("sessions"),
        rows("checkpoints")
    );
    let incomplete: Vec<_> = recovered.tables.iter().filter(|t| t.incomplete).collect();
    if !incomplete.is_empty() && incomplete.iter().all(|t| t.rows == 0) {
        println!(
            "lost         nothing of {} was readable: the daemon starts with no records",
            db.display()
        );
    } else if !incomplete.is_empty() {
        let tables: Vec<String> = incomplete
            .iter()
            .map(|t| format!("{} ({} copied)", t.table, t.rows))
            .collect();
        println!(
            "lost         the rows after the first unreadable one of {}",
            tables.join(", ")
        );
    }
}

/// True when `pid` runs as the systemd unit `grove.service`.
fn under_systemd(pid: u32) -> bool {
    grove_sys::proc::cgroups(pid)
        .iter()
        .any(|path| path.ends_with("/grove.service"))
}

/// Runs `systemctl ARGS`; says clearly when systemctl is missing or fails.
fn systemctl(args: &[&str]) -> Result<()> {
    let shown = format!("systemctl {}", args.join(" "));
    match Command::new("systemctl").args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(anyhow!(
            "`{shown}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(anyhow!("systemctl is not installed (no systemd here?)"))
        }
        Err(e) => Err(anyhow!("cannot run `{shown}`: {e}")),
    }
}

/// The systemd user unit that runs `grove daemon run`.
fn unit_text(exe: &Path, env: &[(&str, String)]) -> String {
    let mut text = String::from(
        "# Written by `grove daemon install`. The daemon also starts by itself when a\n\
         # grove command needs it; this unit starts it at login and restarts it on failure.\n\
         [Unit]\n\
         Description=grove: runs coding agents in parallel, each in its own git worktree\n\
         \n\
         [Service]\n\
         Type=simple\n",
    );
    text.push_str(&format!(
        "ExecStart={} daemon run\n",
        systemd_quote(&exe.to_string_lossy())
    ));
    for (name, value) in env {
        text.push_str(&format!(
            "Environment={}\n",
            systemd_quote(&format!("{name}={value}"))
        ));
    }
    text.push_str(
        "Restart=on-failure\n\
         RestartSec=2\n\
         # Agents outlive the daemon: stopping it must not kill their process trees.\n\
         KillMode=process\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
    );
    text
}

/// Quotes a word for a unit file when it needs it (spaces, quotes, backslashes, %).
fn systemd_quote(word: &str) -> String {
    let escaped = word.replace('%', "%%");
    if escaped
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'')
    {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        escaped
    }
}

fn unit_path() -> Result<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })
        .ok_or_else(|| anyhow!("cannot find the config directory: set XDG_CONFIG_HOME or HOME"))?;
    Ok(config.join("systemd/user/grove.service"))
}

fn install(enable: bool, json: bool) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("finding the grove executable")?;
    let env: Vec<(&str, String)> = ["GROVE_HOME", "GROVE_WORKTREE_ROOT"]
        .into_iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
            // The daemon runs with / as its directory: make relative paths absolute.
            let path = std::path::absolute(&value).unwrap_or_else(|_| PathBuf::from(&value));
            Some((name, path.display().to_string()))
        })
        .collect();
    let path = unit_path()?;
    let text = unit_text(&exe, &env);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let mut steps = Vec::new();
    let mut failure = None;
    if enable {
        if let Err(e) = systemctl(&["--user", "daemon-reload"]) {
            failure = Some(format!(
                "{e:#}\nthe unit is written but not enabled; grove still starts its daemon by \
                 itself when a command needs it"
            ));
        } else {
            steps.push("systemctl --user daemon-reload".to_string());
            // A daemon started on demand holds the lock: systemd's could not start.
            let dirs = dirs()?;
            if let Some(pid) = connect_existing(&dirs)
                .ok()
                .and_then(|mut c| c.hello().ok().map(|h| h.pid))
            {
                if !under_systemd(pid) {
                    stop_daemon(&dirs)?;
                    steps.push(format!("grove daemon stop (pid {pid}, started on demand)"));
                }
            }
            match systemctl(&["--user", "enable", "--now", "grove"]) {
                Ok(()) => steps.push("systemctl --user enable --now grove".to_string()),
                Err(e) => {
                    failure = Some(format!(
                        "{e:#}\ngrove still starts its daemon by itself when a command needs it"
                    ))
                }
            }
        }
    }
    if json {
        print_json(&serde_json::json!({
            "unit": path,
            "text": text,
            "enabled": enable && failure.is_none(),
            "ran": steps,
            "error": failure,
        }))?;
    } else {
        println!("wrote {}:\n", path.display());
        println!("{}", text.trim_end());
        println!();
        for step in &steps {
            println!("ran `{step}`");
        }
        if let Some(why) = &failure {
            eprintln!("grove: error: {why}");
        } else if enable {
            println!(
                "grove runs as the systemd user service `grove` (`systemctl --user status grove`)"
            );
        } else {
            println!(
                "enable it with `systemctl --user daemon-reload && systemctl --user enable --now grove` \
                 (or `grove daemon install --enable`)"
            );
        }
    }
    Ok(if failure.is_some() {
        ExitCode::from(AGENT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Sends SIGTERM to the pid the daemon wrote into its lock file.
fn terminate_by_lock_pid(lock_path: &std::path::Path) -> Result<u32> {
    let text = std::fs::read_to_string(lock_path)?;
    let pid: u32 = text
        .trim()
        .parse()
        .map_err(|_| anyhow!("{} holds no daemon pid", lock_path.display()))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    Ok(pid)
}

/// A time in the past or future, relative to now.
fn when(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "-".into();
    };
    let now = grove_agent_shim::now_ms();
    if ms <= now {
        format!("{} ago", age(ms))
    } else {
        format!("in {}", crate::output::duration(ms - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_this_grove_with_its_home() {
        let text = unit_text(
            Path::new("/opt/my tools/grove"),
            &[("GROVE_HOME", "/srv/grove".into())],
        );
        assert!(
            text.contains("ExecStart=\"/opt/my tools/grove\" daemon run\n"),
            "{text}"
        );
        assert!(
            text.contains("Environment=GROVE_HOME=/srv/grove\n"),
            "{text}"
        );
        assert!(text.contains("Restart=on-failure\n"), "{text}");
        assert!(text.contains("WantedBy=default.target"), "{text}");
        assert_eq!(systemd_quote("50%"), "50%%");
    }
}

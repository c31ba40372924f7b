use crate::cli::DaemonCommand;
use crate::connect::{connect_existing, dirs};
use crate::exit::UNREACHABLE;
use crate::output::{age, print_json};
use anyhow::{anyhow, Result};
use grove_proto::methods::{DaemonStatus, DaemonStop, Empty};
use grove_proto::ClientError;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

pub fn run(command: DaemonCommand, json: bool) -> Result<ExitCode> {
    match command {
        DaemonCommand::Run => {
            crate::daemon_process::run()?;
            Ok(ExitCode::SUCCESS)
        }
        DaemonCommand::Status => status(json),
        DaemonCommand::Stop => stop(json),
    }
}

fn status(json: bool) -> Result<ExitCode> {
    let dirs = dirs()?;
    let mut client = match connect_existing(&dirs) {
        Ok(client) => client,
        Err(ClientError::Unreachable { .. }) => {
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
        println!("socket       {}", status.socket.display());
        println!("state        {}", status.state_dir.display());
        println!("worktrees    {}", status.worktree_root.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn stop(json: bool) -> Result<ExitCode> {
    let dirs = dirs()?;
    let pid = match connect_existing(&dirs) {
        Ok(mut client) => {
            client.call::<DaemonStop>(&Empty {})?;
            client.hello.pid
        }
        Err(ClientError::Unreachable { .. }) => {
            if json {
                print_json(&serde_json::json!({ "stopped": false, "running": false }))?;
            } else {
                println!("grove daemon: not running");
            }
            return Ok(ExitCode::SUCCESS);
        }
        // A daemon of another version cannot be asked; SIGTERM stops it just as well.
        Err(e) if e.is_protocol_mismatch() => terminate_by_lock_pid(&dirs.daemon_lock())?,
        Err(e) => return Err(e.into()),
    };
    wait_until_gone(&dirs.daemon_lock())?;
    if json {
        print_json(&serde_json::json!({ "stopped": true, "pid": pid }))?;
    } else {
        println!("grove daemon: stopped (pid {pid}); running agents keep running");
    }
    Ok(ExitCode::SUCCESS)
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

/// The daemon holds its lock until it exits: taking the lock is how we learn it is gone.
fn wait_until_gone(lock_path: &std::path::Path) -> Result<()> {
    let file = File::open(lock_path)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Flock::lock(file, FlockArg::LockShared).is_ok());
    });
    match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(_) => Ok(()),
        Err(_) => Err(anyhow!(
            "the daemon did not exit within 15s; see {}",
            lock_path.with_file_name("daemon.log").display()
        )),
    }
}

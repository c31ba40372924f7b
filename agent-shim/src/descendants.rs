//! Finding every process below the shim. Because the shim is a child subreaper, a
//! process that double-forks or calls `setsid` is still reparented to it, so walking
//! parent links in /proc finds the whole tree, escapees included.

use crate::program::SHIM_ARG;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

static DAEMON_LOCK: OnceLock<PathBuf> = OnceLock::new();

/// A grove daemon started from inside this agent (a `grove` command autostarting it
/// after a crash) is reparented to us, the subreaper, when its starter exits. It is not
/// the agent's: never count it, its shims or their agents as ours, never signal them.
/// Its pid is read from the daemon's lock file each time, as daemons come and go.
pub fn spare_daemon(lock: PathBuf) {
    let _ = DAEMON_LOCK.set(lock);
}

/// Grove's own processes (a daemon, other agents' shims) can end up below this shim when a
/// daemon was restarted from inside this agent; they and their trees are never ours.
/// Shims are known by their argument, not their binary: `grove-shim __shim` and the
/// fallback `grove __shim` alike.
fn is_grove_service(pid: i32) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let shim = SHIM_ARG.as_bytes();
    match args.get(1..3) {
        Some([first, _]) if *first == shim => true,
        Some([first, second]) => *first == b"daemon" && *second == b"run",
        _ => args.get(1).is_some_and(|a| *a == shim),
    }
}

fn spared_pid() -> Option<i32> {
    let text = fs::read_to_string(DAEMON_LOCK.get()?).ok()?;
    text.trim().parse().ok()
}

/// Parent pid of `pid`, from /proc/<pid>/stat (field 4, after the parenthesised name,
/// which may itself contain spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Every live (or zombie) descendant of `root`.
pub fn descendants_of(root: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let spared = spared_pid();
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if Some(child) == spared || is_grove_service(child) {
                continue;
            }
            found.push(child);
            stack.push(child);
        }
    }
    found
}

/// Sends `signal` to every descendant of `root`; returns how many there were.
pub fn signal_descendants(root: i32, signal: Signal) -> usize {
    let pids = descendants_of(root);
    for &pid in &pids {
        // A process may exit between the scan and the signal; that is the goal anyway.
        let _ = kill(Pid::from_raw(pid), signal);
    }
    pids.len()
}

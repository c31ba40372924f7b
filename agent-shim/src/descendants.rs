//! Finding every process below the shim. Because the shim is a child subreaper, a
//! process that double-forks or calls `setsid` is still reparented to it, so walking
//! parent links in /proc finds the whole tree, escapees included.

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
/// Its pid is read from the daemon's lock file each time, as daemons come and go. Shims
/// of a daemon that is gone are no longer spared: they and their agents go with this
/// agent's tree.
pub fn spare_daemon(lock: PathBuf) {
    let _ = DAEMON_LOCK.set(lock);
}

/// The daemon to spare: the pid in the daemon's lock file, and only while that process
/// really holds the lock (the kernel's lock table says so). Never recognised by its
/// argv: an agent can name a process anything, and a spared process outlives `kill`.
/// A jailed agent cannot write the lock file, so it cannot put its own pid there.
fn spared_pid() -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let lock = DAEMON_LOCK.get()?;
    let pid: u32 = fs::read_to_string(lock).ok()?.trim().parse().ok()?;
    let inode = fs::metadata(lock).ok()?.ino();
    grove_sys::proc::holds_flock(pid, inode).then_some(pid as i32)
}

/// Every live (or zombie) descendant of `root`.
pub fn descendants_of(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, stat) in grove_sys::proc::table() {
        children
            .entry(stat.parent as i32)
            .or_default()
            .push(pid as i32);
    }
    let spared = spared_pid();
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if Some(child) == spared {
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

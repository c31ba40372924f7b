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
    let pid: i32 = fs::read_to_string(lock).ok()?.trim().parse().ok()?;
    let inode = fs::metadata(lock).ok()?.ino();
    let table = fs::read_to_string("/proc/locks").ok()?;
    holds_flock(&table, pid, inode).then_some(pid)
}

/// True when /proc/locks lists a granted flock of `pid` on inode `inode`. Lines are
/// `N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`; waiters have `->`
/// after the number, so they do not match.
fn holds_flock(table: &str, pid: i32, inode: u64) -> bool {
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"FLOCK")
            && fields.get(4).and_then(|p| p.parse::<i32>().ok()) == Some(pid)
            && fields
                .get(5)
                .and_then(|dev| dev.rsplit(':').next())
                .and_then(|ino| ino.parse::<u64>().ok())
                == Some(inode)
    })
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

#[cfg(test)]
mod tests {
    use super::holds_flock;

    #[test]
    fn only_a_granted_flock_of_that_pid_on_that_inode_counts() {
        let table = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:77 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 5151 fd:01:77 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 6161 fd:01:77 0 EOF\n";
        assert!(holds_flock(table, 4242, 77));
        assert!(!holds_flock(table, 4242, 78));
        assert!(!holds_flock(table, 5151, 77));
        assert!(!holds_flock(table, 6161, 77));
    }
}

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
/// Its pid is read from the daemon's lock file each time, as daemons come and go.
pub fn spare_daemon(lock: PathBuf) {
    let _ = DAEMON_LOCK.set(lock);
}

/// Another agent's shim (its daemon started inside this agent, then went away): a
/// process that claimed an agent's start. Shims write `{"pid": P, "start_time": T}` to
/// `<state>/agents/<id>/start-<n>.claim` before their command starts, and a jailed
/// agent cannot write there, so a process is a shim only if such a file names its pid
/// and start time. Its argv only says where to look, never decides.
fn is_claimed_shim(pid: i32) -> bool {
    let looks_like_shim = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|argv| argv.split(|&b| b == 0).nth(1) == Some(crate::program::SHIM_ARG.as_bytes()))
        .unwrap_or(false);
    if !looks_like_shim {
        return false;
    }
    let (Some(agents), Some(started)) = (
        DAEMON_LOCK
            .get()
            .and_then(|lock| Some(lock.parent()?.join("agents"))),
        start_time(pid),
    ) else {
        return false;
    };
    let claim = format!("{{\"pid\": {pid}, \"start_time\": {started}}}");
    let Ok(dirs) = fs::read_dir(agents) else {
        return false;
    };
    dirs.flatten().any(|dir| {
        fs::read_dir(dir.path()).is_ok_and(|files| {
            files.flatten().any(|file| {
                file.file_name().to_string_lossy().ends_with(".claim")
                    && fs::read_to_string(file.path()).is_ok_and(|text| text.trim() == claim)
            })
        })
    })
}

/// Start time of `pid` (field 22 of /proc/<pid>/stat).
fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
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
            if Some(child) == spared || is_claimed_shim(child) {
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

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
    let looks_like_shim = grove_sys::proc::argv(pid as u32)
        .is_some_and(|argv| argv.get(1).map(Vec::as_slice) == Some(crate::SHIM_ARG.as_bytes()));
    if !looks_like_shim {
        return false;
    }
    let (Some(agents), Some(started)) = (
        DAEMON_LOCK
            .get()
            .and_then(|lock| Some(lock.parent()?.join("agents"))),
        grove_sys::proc::start_time(pid as u32),
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

/// The daemon to spare: the pid in the daemon's lock file, and only while that process
/// really holds the lock (the kernel's lock table says so). Never recognised by its
/// argv: an agent can name a process anything, and a spared process outlives `kill`.
/// A jailed agent cannot write the lock file, so it cannot put its own pid there.
pub(crate) fn spared_pid() -> Option<i32> {
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

//! Facts about processes from /proc.

use std::fs::File;
use std::io::Read;

/// /proc/<pid>/stat, read in one go: the file has no size to go by, so reading it
/// into an empty string took six reads (a connection's ancestry is read on every
/// connect).
fn stat(pid: u32) -> Option<String> {
    let mut stat = String::with_capacity(1024);
    File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .read_to_string(&mut stat)
        .ok()?;
    Some(stat)
}

/// Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat).
/// Together with the pid it names one process for good: pids are reused, start times
/// of one pid are not.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = stat(pid)?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so field 22 is index 19.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Parent pid of `pid` (field 4 of /proc/<pid>/stat).
pub fn parent(pid: u32) -> Option<u32> {
    let stat = stat(pid)?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// The cgroup v2 path of `pid` (the `0::` line of /proc/<pid>/cgroup).
pub fn cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim().to_string())
}

/// Where the cgroup2 hierarchy is mounted (from /proc/self/mountinfo).
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == "cgroup2").then(|| {
            before
                .split_whitespace()
                .nth(4)
                .map(std::path::PathBuf::from)
        })?
    })
}

/// True when `pid` is alive and is the process that started at `started`.
pub fn is_same_process(pid: u32, started: u64) -> bool {
    start_time(pid) == Some(started) && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    stat(pid)
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_start_time_is_stable() {
        let me = std::process::id();
        let t = super::start_time(me).expect("own stat");
        assert_eq!(super::start_time(me), Some(t));
        assert!(super::is_same_process(me, t));
        assert!(!super::is_same_process(me, t + 1));
    }
}

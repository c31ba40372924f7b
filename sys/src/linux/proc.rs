//! Facts about processes and mounts, from /proc. The one place grove parses /proc.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::PathBuf;

pub use crate::types::{Mount, Stat};

/// /proc/<pid>/stat, read in one go: the file has no size to go by, so reading it
/// into an empty string took six reads (a connection's ancestry is read on every
/// connect).
pub fn stat(pid: u32) -> Option<Stat> {
    let mut text = String::with_capacity(1024);
    File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    parse_stat(&text)
}

/// The fields after the command name, which may hold spaces and parentheses (hence
/// the last ')'): field 3 (state) is index 0, ppid (4) is 1, utime (14) 11, stime (15)
/// 12, starttime (22) 19.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Stat {
        parent: fields.get(1)?.parse().ok()?,
        zombie: *fields.first()? == "Z",
        sleeping: *fields.first()? == "S",
        process_group: fields.get(2)?.parse().ok()?,
        cpu_ticks: number(11)? + number(12)?,
        start_time: number(19)?,
    })
}

/// Start time of `pid` (see [`Stat::start_time`]).
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Parent pid of `pid`.
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.parent)
}

/// True when `pid` is alive and is the process that started at `started`.
pub fn is_same_process(pid: u32, started: u64) -> bool {
    stat(pid).is_some_and(|s| s.start_time == started && !s.zombie)
}

/// Every process there is.
pub fn all_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every process with its stat, for walking trees.
pub fn table() -> HashMap<u32, Stat> {
    all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// The argument vector of `pid` (/proc/<pid>/cmdline), as bytes.
pub fn argv(pid: u32) -> Option<Vec<Vec<u8>>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let raw = raw.strip_suffix(&[0]).unwrap_or(&raw);
    Some(raw.split(|&b| b == 0).map(<[u8]>::to_vec).collect())
}

/// Resident memory of `pid` in bytes (/proc/<pid>/statm).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let pages: u64 = fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Resident memory of `pid` in bytes, split into anonymous (its own heap and stacks:
/// `RssAnon`) and file-backed (mapped files such as a repository's pack: `RssFile` plus
/// `RssShmem`), from /proc/<pid>/status.
pub fn rss_split(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .trim_start_matches(':')
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let file = kib("RssFile")? + kib("RssShmem").unwrap_or(0);
    Some((kib("RssAnon")? * 1024, file * 1024))
}

/// The files `pid` has mapped, each once (/proc/<pid>/maps): which packs a process
/// keeps mapped. `None` when the process is gone or not ours to read.
pub fn mapped_files(pid: u32) -> Option<Vec<PathBuf>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut files: Vec<PathBuf> = maps
        .lines()
        // address perms offset dev inode path: the path is the sixth field and may
        // hold spaces; anonymous mappings have none, or a [name].
        .filter_map(|line| line.splitn(6, ' ').nth(5))
        .map(str::trim_start)
        .filter(|path| path.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    files.sort();
    files.dedup();
    Some(files)
}

/// Clock ticks per second, the unit of [`Stat::cpu_ticks`].
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// The cgroup v2 path of `pid` (the `0::` line of /proc/<pid>/cgroup).
pub fn cgroup(pid: u32) -> Option<String> {
    cgroup_of(&format!("/proc/{pid}"))
}

/// Every cgroup path of `pid`, one per hierarchy (v1 and v2).
pub fn cgroups(pid: u32) -> Vec<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|text| {
            text.lines()
                .filter_map(|line| Some(line.splitn(3, ':').nth(2)?.trim().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// This process's cgroup v2 path.
pub fn own_cgroup() -> Option<String> {
    cgroup_of("/proc/self")
}

fn cgroup_of(proc_dir: &str) -> Option<String> {
    let text = fs::read_to_string(format!("{proc_dir}/cgroup")).ok()?;
    v2_line(&text)
}

fn v2_line(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim().to_string())
}

/// This process's path in the cgroup v1 hierarchy that has `controller`.
pub fn own_v1_cgroup(controller: &str) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    v1_line(&text, controller)
}

fn v1_line(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.trim().to_string())
    })
}

/// The mounts this process sees.
pub fn mounts() -> Vec<Mount> {
    fs::read_to_string("/proc/self/mountinfo")
        .map(|text| text.lines().filter_map(parse_mount).collect())
        .unwrap_or_default()
}

/// Where the cgroup2 hierarchy is mounted.
pub fn cgroup2_mount() -> Option<Mount> {
    mounts().into_iter().find(|m| m.fstype == "cgroup2")
}

/// Where the cgroup v1 hierarchy with `controller` is mounted.
pub fn v1_mount(controller: &str) -> Option<Mount> {
    mounts()
        .into_iter()
        .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == controller))
}

/// Fields are `id parent major:minor root mount-point options [optional...] - fstype
/// source super-options`.
fn parse_mount(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let before: Vec<&str> = before.split_whitespace().collect();
    let mut after = after.split_whitespace();
    let fstype = after.next()?.to_string();
    let super_options = after
        .nth(1)
        .map(|o| o.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    Some(Mount {
        point: PathBuf::from(unescape_octal(before.get(4)?)),
        fstype,
        read_write: before.get(5)?.split(',').any(|o| o == "rw"),
        super_options,
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let Some(digits) = octal {
            let value = digits
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// True when the kernel's lock table lists a granted flock of `pid` on `inode`.
pub fn holds_flock(pid: u32, inode: u64) -> bool {
    fs::read_to_string("/proc/locks").is_ok_and(|table| flock_listed(&table, pid, inode))
}

/// Lines are `N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`; waiters
/// have `->` after the number, so they do not match.
fn flock_listed(table: &str, pid: u32, inode: u64) -> bool {
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"FLOCK")
            && fields.get(4).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
            && fields
                .get(5)
                .and_then(|dev| dev.rsplit(':').next())
                .and_then(|ino| ino.parse::<u64>().ok())
                == Some(inode)
    })
}

/// The kernel's release (`uname -r`), for messages.
pub fn kernel_release() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|r| r.trim().to_string())
}

/// The executable `pid` runs.
pub fn exe(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The working directory of `pid` (as seen from its own root: a jailed agent's
/// worktree is shown at its own path, so this is that path too).
pub fn cwd(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// Voluntary and involuntary context switches of every thread of `pid`.
pub fn context_switches(pid: u32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        // A thread may end between read_dir and here.
        let Ok(status) = fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for key in ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"] {
            total += status_field(&status, key).unwrap_or(0);
        }
    }
    Some(total)
}

/// `Name:  value` lines of /proc/<pid>/status.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The one-minute load average.
pub fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The CPU's model name.
pub fn cpu_model() -> Option<String> {
    fs::read_to_string("/proc/cpuinfo")
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_string())
        })
}

/// The type of the filesystem that holds `path` (the mount with the longest mount point
/// above it).
pub fn filesystem_type(path: &std::path::Path) -> Option<String> {
    mounts()
        .into_iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
        .map(|m| m.fstype)
}

/// The Unix socket paths `pid` listens on: its socket fds, matched by inode against
/// /proc/net/unix (`Num RefCount Protocol Flags Type St Inode Path`; state 01 listens).
pub fn listening_unix_sockets(pid: u32) -> Vec<PathBuf> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(
                link.strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields.get(7)?;
            (fields.get(5) == Some(&"01")
                && inodes.iter().any(|i| Some(&i.as_str()) == fields.get(6)))
            .then(|| PathBuf::from(path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stat_is_stable() {
        let me = std::process::id();
        let stat = stat(me).expect("own stat");
        assert_eq!(start_time(me), Some(stat.start_time));
        assert!(is_same_process(me, stat.start_time));
        assert!(!is_same_process(me, stat.start_time + 1));
        assert!(!stat.zombie);
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_does_not_shift_fields() {
        let text = "42 (a) b (c) S 7 42 42 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 999 0 0";
        let stat = parse_stat(text).expect("parses");
        assert_eq!(stat.parent, 7);
        assert_eq!(stat.cpu_ticks, 7);
        assert_eq!(stat.start_time, 999);
        assert!(!stat.zombie);
    }

    #[test]
    fn finds_cgroup_mounts_in_mountinfo() {
        let v2 = parse_mount(
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw",
        )
        .expect("parses");
        assert_eq!(v2.point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(v2.fstype, "cgroup2");
        assert!(v2.read_write);
        let pids =
            parse_mount("35 25 0:31 / /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids")
                .expect("parses");
        assert_eq!(pids.fstype, "cgroup");
        assert!(!pids.read_write);
        assert!(pids.super_options.iter().any(|o| o == "pids"));
        let spaced =
            parse_mount(r"43 31 0:40 / /mnt/my\040cgroup rw - cgroup2 none rw").expect("parses");
        assert_eq!(spaced.point, PathBuf::from("/mnt/my cgroup"));
    }

    #[test]
    fn cgroup_lines() {
        let text = "12:pids:/user.slice\n1:name=systemd:/x\n0::/a/b\n";
        assert_eq!(v2_line(text).as_deref(), Some("/a/b"));
        assert_eq!(v1_line(text, "pids").as_deref(), Some("/user.slice"));
        assert_eq!(v1_line(text, "cpu"), None);
    }

    #[test]
    fn only_a_granted_flock_of_that_pid_on_that_inode_counts() {
        let table = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:77 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 5151 fd:01:77 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 6161 fd:01:77 0 EOF\n";
        assert!(flock_listed(table, 4242, 77));
        assert!(!flock_listed(table, 4242, 78));
        assert!(!flock_listed(table, 5151, 77));
        assert!(!flock_listed(table, 6161, 77));
    }

    #[test]
    fn this_machine_and_this_process_are_described() {
        let me = std::process::id();
        assert!(exe(me).is_some());
        assert!(context_switches(me).is_some());
        assert!(rss_bytes(me).is_some_and(|b| b > 0));
        assert!(load_average().is_some());
        assert!(filesystem_type(std::path::Path::new("/")).is_some());
        assert!(kernel_release().is_some());
        assert!(table().contains_key(&me));
    }

    #[test]
    fn an_epoll_fdinfo_names_its_targets() {
        let text = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:18\n\
                    tfd:       12 events:       19 data:                c  pos:0 ino:9 sdev:d\n";
        assert_eq!(epoll_fds(text), [0, 12]);
    }

    #[test]
    fn own_argv_is_read() {
        let argv = argv(std::process::id()).expect("own argv");
        let exe = std::env::args_os().next().expect("argv[0]");
        assert_eq!(
            argv.first().map(Vec::as_slice),
            Some(exe.as_encoded_bytes())
        );
    }
}

/// True when a thread of `pid` sleeps waiting for input from the terminal `tty` (its
/// device number): in a read of it, in an epoll wait whose set holds it (an event loop
/// such as node's or tokio's), or, for the main thread, in a poll or select while the
/// terminal is its stdin (their sets are in the process's memory, out of reach). Every
/// thread counts: a program may read the terminal on any of them while its main thread
/// waits on a lock. From /proc/<pid>/task/*/syscall, which the agent's ancestors may read.
pub fn waiting_on_terminal(pid: u32, tty: u64) -> bool {
    let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    threads
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .any(|tid| thread_waits_on_terminal(pid, tid, tty))
}

fn thread_waits_on_terminal(pid: u32, tid: u32, tty: u64) -> bool {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else {
        return false;
    };
    let mut fields = text.split_whitespace();
    let Some(Ok(number)) = fields.next().map(str::parse::<i64>) else {
        return false;
    };
    let fd_arg = fields
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    let is_tty = |fd: u64| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|m| m.rdev() == tty)
    };
    if syscalls::READS.contains(&number) {
        return fd_arg.is_some_and(is_tty);
    }
    if syscalls::EPOLL_WAITS.contains(&number) {
        return fd_arg.is_some_and(|epoll| epoll_targets(pid, epoll).into_iter().any(is_tty));
    }
    syscalls::WAITS.contains(&number) && tid == pid && is_tty(0)
}

/// The descriptors an epoll instance of `pid` watches (`tfd:` lines of its fdinfo).
fn epoll_targets(pid: u32, epoll: u64) -> Vec<u64> {
    fs::read_to_string(format!("/proc/{pid}/fdinfo/{epoll}"))
        .map(|text| epoll_fds(&text))
        .unwrap_or_default()
}

fn epoll_fds(fdinfo: &str) -> Vec<u64> {
    fdinfo
        .lines()
        .filter_map(|line| {
            line.strip_prefix("tfd:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// System call numbers that read a file descriptor (its first argument) and that wait
/// on many, per architecture.
mod syscalls {
    #[cfg(target_arch = "x86_64")]
    pub const READS: &[i64] = &[0, 17, 19, 295, 327];
    #[cfg(target_arch = "x86_64")]
    pub const WAITS: &[i64] = &[7, 23, 270, 271];
    #[cfg(target_arch = "x86_64")]
    pub const EPOLL_WAITS: &[i64] = &[232, 281, 441];
    #[cfg(target_arch = "aarch64")]
    pub const READS: &[i64] = &[63, 65, 67, 69, 286];
    #[cfg(target_arch = "aarch64")]
    pub const WAITS: &[i64] = &[72, 73];
    #[cfg(target_arch = "aarch64")]
    pub const EPOLL_WAITS: &[i64] = &[22, 441];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const READS: &[i64] = &[];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const WAITS: &[i64] = &[];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const EPOLL_WAITS: &[i64] = &[];
}

/// True when `entry` (`NAME=value`) is in the environment `pid` started with.
pub fn environ_has(pid: u32, entry: &[u8]) -> bool {
    fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|&b| b == 0).any(|e| e == entry))
}

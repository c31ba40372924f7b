//! The cgroup of the daemon's own git processes, and the reaper that empties it when
//! the daemon dies. A parent-death signal reaches only the git the daemon started;
//! git's helpers (`checkout--worker`, `index-pack`) are its children and outlived a
//! killed daemon (21 of 78 kills, alive 0.3 s later). Born or moved into one cgroup,
//! they all go at once: the reaper, a child forked at start that holds a pidfd of the
//! daemon, writes `cgroup.kill` the moment the daemon is gone, however it ended.

use super::cgroup::join_through;
use super::pidfd;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{fork, ForkResult};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

/// Names of these cgroups, beside `grove/` (the agents') below the daemon's own cgroup:
/// `grove-git-<instance>`, one per state directory, as one daemon at a time owns one.
const PREFIX: &str = "grove-git-";

/// The cgroup every git of the daemon joins (in `pre_exec`), with its reaper running.
#[derive(Debug)]
pub struct GitCgroup {
    procs: File,
    dir: PathBuf,
}

impl GitCgroup {
    /// Makes (or takes over) the cgroup of daemon `instance` (a name of its state
    /// directory), kills what an earlier daemon of it left there, and starts the
    /// reaper. An error where cgroups cannot be used: git's helpers are then found by
    /// the daemon's mark at the next start instead.
    pub fn start(instance: &str) -> io::Result<GitCgroup> {
        let base = super::cgroup::base_dir()
            .ok_or_else(|| io::Error::other("no cgroup2 hierarchy to make it in"))?;
        let dir = base.join(format!("{PREFIX}{instance}"));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let kill = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.kill"))?;
        nix::unistd::write(&kill, b"1")?;
        let procs = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))?;
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::other("a cgroup path with a NUL byte"))?;
        start_reaper(kill, path)?;
        Ok(GitCgroup { procs, dir })
    }

    /// Moves the calling process in. Async-signal-safe: for `pre_exec`.
    pub fn join(&self) -> io::Result<()> {
        join_through(&self.procs)
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

/// Forks the reaper: it waits for this process to end, then kills the cgroup behind
/// `kill`. The child makes system calls only (fork in a threaded process allows no
/// more), and closes every other descriptor first: the instance lock among them must
/// go with the daemon.
fn start_reaper(kill: File, dir: std::ffi::CString) -> io::Result<()> {
    let daemon = pidfd::open(std::process::id())?;
    // SAFETY: the child runs only async-signal-safe system calls, then _exit.
    match unsafe { fork() }? {
        ForkResult::Child => reaper(daemon, kill, &dir),
        ForkResult::Parent { .. } => Ok(()),
    }
}

fn reaper(daemon: OwnedFd, kill: File, dir: &std::ffi::CStr) -> ! {
    let keep = [daemon.as_raw_fd(), kill.as_raw_fd()];
    close_all_but(keep);
    let _ = nix::sys::prctl::set_name(c"grove-git-reaper");
    let mut fds = [PollFd::new(daemon.as_fd(), PollFlags::POLLIN)];
    while let Err(nix::errno::Errno::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
    let _ = nix::unistd::write(&kill, b"1");
    // The cgroup can go once the kernel has taken its last process out (EBUSY until
    // then); a daemon of the same state directory makes it again.
    for _ in 0..100 {
        let removed = rustix::fs::unlinkat(rustix::fs::CWD, dir, rustix::fs::AtFlags::REMOVEDIR);
        if !matches!(removed, Err(rustix::io::Errno::BUSY)) {
            break;
        }
        // A poll of nothing is a sleep that is async-signal-safe.
        let _ = poll(&mut [], PollTimeout::from(10u8));
    }
    // SAFETY: ends the child without running the parent's destructors.
    unsafe { libc::_exit(0) }
}

/// Closes every descriptor but the two in `keep` (close_range, no allocation).
fn close_all_but(keep: [i32; 2]) {
    let (low, high) = (keep[0].min(keep[1]) as u32, keep[0].max(keep[1]) as u32);
    let close = |first: u32, last: u32| {
        if first <= last {
            // SAFETY: closes descriptors no Rust object of this child uses again.
            let _ = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        }
    };
    if low > 0 {
        close(0, low - 1);
    }
    close(low + 1, high - 1);
    close(high + 1, u32::MAX);
}

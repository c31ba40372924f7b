//! Keeping hold of a process tree: the child subreaper (Linux 3.4) and no_new_privs.

use std::io;

/// Makes orphaned descendants of this process its children instead of init's, so a
/// shim can reap and kill what its agent left behind.
pub fn become_subreaper() -> io::Result<()> {
    Ok(nix::sys::prctl::set_child_subreaper(true)?)
}

/// No exec from here on gains privileges (setuid bits, file capabilities): Landlock
/// requires it of unprivileged callers. Async-signal-safe (one prctl).
pub fn set_no_new_privs() -> io::Result<()> {
    Ok(nix::sys::prctl::set_no_new_privs()?)
}

/// The calling process gets SIGKILL when the thread that started it ends, and does not
/// start at all when `parent` is already gone. For `pre_exec`: async-signal-safe (one
/// prctl, one getppid).
pub fn die_with_parent(parent: u32) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Err(io::Error::other("the parent is gone"));
    }
    Ok(())
}

/// SIGKILLs every process (other than this one) whose environment carries `entry`
/// (`NAME=value`) and waits, at most until `deadline`, for each to end: descendants that
/// outlived the process that marked them (git's own helpers, which no parent-death
/// signal reaches). Scans again after each round, for what forked in between, until a
/// scan finds none; returns how many were killed. A process that dropped the entry from
/// its environment escapes this.
pub fn kill_marked(entry: &[u8], deadline: std::time::Instant) -> io::Result<usize> {
    let me = std::process::id();
    let mut killed = 0;
    loop {
        let marked: Vec<u32> = super::proc::all_pids()
            .into_iter()
            .filter(|&pid| pid != me && super::proc::environ_has(pid, entry))
            .collect();
        if marked.is_empty() {
            return Ok(killed);
        }
        let mut dying = Vec::with_capacity(marked.len());
        for pid in marked {
            // The pidfd pins the process: checked again through it, a recycled pid
            // that no longer carries the entry is left alone.
            let Ok(pidfd) = super::pidfd::open(pid) else {
                continue;
            };
            if !super::proc::environ_has(pid, entry) {
                continue;
            }
            match rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL) {
                Ok(()) => {
                    killed += 1;
                    dying.push(pidfd);
                }
                Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for pidfd in &dying {
            wait_until_ended(pidfd, deadline)?;
        }
    }
}

/// Waits until the process of `pidfd` has ended (its pidfd turns readable).
fn wait_until_ended(pidfd: &std::os::fd::OwnedFd, deadline: std::time::Instant) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "a killed process did not end in time",
            ));
        }
        let timeout = Timespec::try_from(left).map_err(io::Error::other)?;
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

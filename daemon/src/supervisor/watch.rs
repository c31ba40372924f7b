//! Waiting for a process to end without polling: a pidfd becomes readable when the
//! process exits, whether or not it is our child (adopted shims are not).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Resolves once `pid` has exited. If it was our child, reaps it.
pub async fn exited(pid: u32) -> io::Result<()> {
    match pidfd_open(pid) {
        Ok(fd) => {
            // SAFETY: the AsyncFd owns the pidfd, so it stays open while registered.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            let _guard = fd.readable().await?;
        }
        // Already gone (and perhaps already reaped).
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
        Err(e) => return Err(e),
    }
    reap(pid);
    Ok(())
}

/// Collects the zombie of a child shim; a no-op for processes that are not our children.
fn reap(pid: u32) {
    let _ = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid as i32),
        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
    );
}

//! Waiting for a process to end without polling: a pidfd becomes readable when the
//! process exits, whether or not it is our child (adopted shims are not).

use std::io;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Resolves once `pid` has exited. If it was our child, reaps it.
pub async fn exited(pid: u32) -> io::Result<()> {
    match grove_sys::pidfd::open(pid) {
        Ok(fd) => {
            // SAFETY: the AsyncFd owns the pidfd, so it stays open while registered.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            let _guard = fd.readable().await?;
        }
        // Already gone (and perhaps already reaped).
        Err(e) if grove_sys::pidfd::is_gone(&e) => {}
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

//! pidfds (Linux 5.3): a descriptor that becomes readable when a process ends, whether
//! or not it is our child, and that never names a recycled pid.

use std::io;
use std::os::fd::OwnedFd;

/// A pidfd for `pid`; `ESRCH` (as an `io::Error`) when it is already gone.
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// True when `error` says the process did not exist.
pub fn is_gone(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ESRCH)
}

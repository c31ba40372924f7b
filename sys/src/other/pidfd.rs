//! No pidfds here (a port would watch exits with kqueue's EVFILT_PROC).

use std::io;
use std::os::fd::OwnedFd;

pub fn open(_pid: u32) -> io::Result<OwnedFd> {
    Err(crate::unsupported("watching a process through a pidfd"))
}

pub fn is_gone(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ESRCH)
}

//! No sigtimedwait here: the shim, its only user, does not run on this OS.

use nix::sys::signal::{SigSet, Signal};
use std::time::Duration;

pub fn wait_timeout(_signals: &SigSet, _timeout: Option<Duration>) -> Option<Signal> {
    None
}

pub struct SignalFd(std::os::fd::OwnedFd);

impl SignalFd {
    pub fn new(_signals: &SigSet) -> std::io::Result<SignalFd> {
        Err(crate::unsupported("signalfd"))
    }

    pub fn take(&mut self) -> Option<Signal> {
        None
    }
}

impl std::os::fd::AsFd for SignalFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

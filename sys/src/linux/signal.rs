//! Waiting for a signal with a deadline (sigtimedwait(2)), or beside file descriptors
//! (signalfd(2)).

use nix::sys::signal::{SigSet, Signal};
use std::time::Duration;

/// Blocks until one of `signals` (blocked by the caller) arrives or `timeout` passes.
pub fn wait_timeout(signals: &SigSet, timeout: Option<Duration>) -> Option<Signal> {
    let timespec = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let timespec_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the set and timespec outlive the call; a null info pointer is allowed.
    // (Neither nix nor rustix offers a safe sigtimedwait.)
    let signo = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), timespec_ptr) };
    if signo < 0 {
        return None;
    }
    Signal::try_from(signo).ok()
}

/// Blocked signals as a file descriptor, so one poll waits for them and for sockets.
pub struct SignalFd(nix::sys::signalfd::SignalFd);

impl SignalFd {
    /// `signals` must already be blocked in every thread.
    pub fn new(signals: &SigSet) -> std::io::Result<SignalFd> {
        use nix::sys::signalfd::{SfdFlags, SignalFd as Fd};
        Fd::with_flags(signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map(SignalFd)
            .map_err(std::io::Error::from)
    }

    /// The next pending signal, if there is one.
    pub fn take(&mut self) -> Option<Signal> {
        let info = self.0.read_signal().ok()??;
        Signal::try_from(info.ssi_signo as i32).ok()
    }
}

impl std::os::fd::AsFd for SignalFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

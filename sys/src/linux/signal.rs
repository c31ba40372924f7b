//! Waiting for a signal with a deadline (sigtimedwait(2)).

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

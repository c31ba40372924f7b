//! No sigtimedwait here: the shim, its only user, does not run on this OS.

use nix::sys::signal::{SigSet, Signal};
use std::time::Duration;

pub fn wait_timeout(_signals: &SigSet, _timeout: Option<Duration>) -> Option<Signal> {
    None
}

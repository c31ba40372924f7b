//! No namespaces here: a jailed agent's view is refused, never replaced by the whole
//! machine.

use std::io;
use std::os::fd::BorrowedFd;
use std::process::Command;
use std::time::Duration;

pub use crate::types::{Ended, Entry, View};

#[derive(Debug)]
pub struct Started {
    pub init: nix::unistd::Pid,
}

impl Started {
    pub fn agent_status(&self) -> Option<Ended> {
        None
    }
}

pub fn spawn(
    _view: &View,
    _cgroup: Option<BorrowedFd<'_>>,
    _grace: Duration,
    _command: &mut Command,
) -> io::Result<Started> {
    Err(crate::unsupported("a jailed agent's view"))
}

pub fn probe() -> io::Result<()> {
    Err(crate::unsupported("a jailed agent's view"))
}

//! No namespaces here: a jailed agent's view is refused, never replaced by the whole
//! machine.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Show { path: PathBuf, writable: bool },
    Scratch { path: PathBuf },
    Link { path: PathBuf, target: PathBuf },
}

impl Entry {
    pub fn path(&self) -> &Path {
        match self {
            Entry::Show { path, .. } | Entry::Scratch { path } | Entry::Link { path, .. } => path,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub entries: Vec<Entry>,
}

#[derive(Debug)]
pub struct Started {
    pub init: nix::unistd::Pid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
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

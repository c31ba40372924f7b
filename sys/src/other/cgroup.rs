//! No cgroups here: no agent gets one, and `--jail` (which needs one) is refused.

use std::fs::File;
use std::io;

pub use crate::types::Usage;

#[derive(Debug)]
pub struct AgentCgroup(());

impl AgentCgroup {
    pub fn create(_agent_id: &str) -> Option<AgentCgroup> {
        None
    }

    pub fn born_inside(&self) -> bool {
        false
    }

    pub fn birth_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    pub fn spawn_inside(&self, _command: &mut std::process::Command) -> io::Result<u32> {
        Err(crate::unsupported("cgroups"))
    }

    pub fn joiner(&self) -> io::Result<Joiner> {
        Err(crate::unsupported("cgroups"))
    }

    pub fn kill_all(&self) -> bool {
        false
    }

    pub fn limit_pids(&self, _max: u64) -> io::Result<()> {
        Err(crate::unsupported("cgroups"))
    }

    pub fn usage(&self) -> Usage {
        Usage::default()
    }

    pub fn remove(self) {}
}

pub fn kill_stale_cgroup(_agent_id: &str) -> std::io::Result<Option<std::path::PathBuf>> {
    Ok(None)
}

pub fn freeze(_agent_id: &str, _frozen: bool) -> io::Result<bool> {
    Ok(false)
}

pub fn is_frozen(_agent_id: &str) -> Option<bool> {
    None
}

pub fn remove_when_empty(_dir: &std::path::Path) {}

pub fn usable() -> bool {
    false
}

#[derive(Debug)]
pub struct Joiner(());

impl Joiner {
    pub fn join(&self) -> io::Result<()> {
        Err(crate::unsupported("cgroups"))
    }
}

pub fn join_through(_procs: &File) -> io::Result<()> {
    Err(crate::unsupported("cgroups"))
}

pub fn agent_of_own_cgroup() -> Option<String> {
    None
}

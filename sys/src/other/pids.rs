//! No pids cgroup here: `--max-procs` is refused.

use std::fs::File;
use std::io;

#[derive(Debug)]
pub struct PidsCgroup(());

impl PidsCgroup {
    pub fn create(_agent_id: &str, _max: u64) -> Result<PidsCgroup, String> {
        Err(why_unavailable())
    }

    pub fn joiner(&self) -> io::Result<File> {
        Err(crate::unsupported("a pids cgroup"))
    }

    pub fn remove(self) {}
}

pub fn available() -> bool {
    false
}

pub fn why_unavailable() -> String {
    crate::unsupported("limiting the number of processes (a pids cgroup)").to_string()
}

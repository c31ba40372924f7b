//! The data the seam hands out, the same on every OS: defined once here, so that
//! `linux/` and `other/` cannot drift apart. Each OS module re-exports them where they
//! belong (`proc::Stat`, `proc::Mount`, `cgroup::Usage`).

use std::path::PathBuf;

/// What grove reads of /proc/<pid>/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub parent: u32,
    /// Exited but not yet reaped.
    pub zombie: bool,
    /// Asleep (state S): waiting for something.
    pub sleeping: bool,
    pub process_group: u32,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Clock ticks since boot. With the pid it names one process for good: pids are
    /// reused, start times of one pid are not.
    pub start_time: u64,
}

/// One line of /proc/self/mountinfo, as much as grove needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fstype: String,
    /// Mounted read-write.
    pub read_write: bool,
    /// The filesystem's own options (for cgroup v1: its controllers).
    pub super_options: Vec<String>,
}

/// Resource use of an agent's tree, as its cgroup counted it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_usec: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
}

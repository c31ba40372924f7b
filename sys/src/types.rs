//! The data the seam hands out, the same on every OS: defined once here, so that
//! `linux/` and `other/` cannot drift apart. Each OS module re-exports them where they
//! belong (`proc::Stat`, `proc::Mount`, `cgroup::Usage`, `view::Entry`).

use std::path::{Path, PathBuf};

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

/// One thing the agent sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The path (file or directory) at its own place; read-only unless `writable`.
    /// A path that does not exist is left out.
    Show { path: PathBuf, writable: bool },
    /// An empty tmpfs directory (`/dev/null` where `path` is a file of a shown
    /// directory): hides what is there. The jail lets the agent write none of it.
    Scratch { path: PathBuf },
    /// A symbolic link at `path` to `target`.
    Link { path: PathBuf, target: PathBuf },
    /// The directory `source` at `path`, writable (the agent's private home at the
    /// place of `$HOME`, with the shown toolchains of `$HOME` bound over it).
    Bind { source: PathBuf, path: PathBuf },
}

impl Entry {
    pub fn path(&self) -> &Path {
        match self {
            Entry::Show { path, .. }
            | Entry::Scratch { path }
            | Entry::Link { path, .. }
            | Entry::Bind { path, .. } => path,
        }
    }
}

/// A jailed agent's whole view: its entries (`/proc` is always the namespace's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub entries: Vec<Entry>,
}

/// How the agent ended, as init saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

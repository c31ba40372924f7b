//! Linux: the implementation grove runs on.

/// Longest path a Unix socket can be bound to: `sun_path` is 108 bytes with its NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

pub mod cgroup;
mod clone_into;
pub mod fs;
pub mod git_cgroup;
pub mod landlock;
pub mod memory;
pub mod no_sockets;
pub mod peer;
pub mod pidfd;
pub mod pids;
pub mod priority;
pub mod proc;
pub mod random;
pub mod reflink;
pub mod signal;
pub mod subvolume;
pub mod supervise;
pub mod view;
pub mod watch;

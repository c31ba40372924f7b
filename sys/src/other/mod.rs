//! Every other Unix: what POSIX allows, "not supported on this OS" for the rest (see
//! [`crate::unsupported`]). The signatures match `linux/` one for one.

/// Longest path a Unix socket can be bound to: `sun_path` is 104 bytes with its NUL on
/// macOS and the BSDs.
pub const MAX_SOCKET_PATH_BYTES: usize = 103;

pub mod cgroup;
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

//! The platform seam: everything grove needs from the operating system beyond POSIX
//! (process facts from /proc, pidfds, the child subreaper, `sigtimedwait`, Landlock,
//! cgroups, inotify, peer credentials, getrandom) lives here, behind one API with one
//! implementation per OS, so that the rest of the workspace is portable Rust.
//!
//! - `linux/`: the real implementation (the only OS grove runs agents on today; the
//!   kernel versions each feature needs are in README.md, "Platform").
//! - `other/`: every other Unix. It compiles, does what POSIX allows (random bytes,
//!   peer uid, terminal size) and answers "not supported on this OS" for the rest, so a
//!   port to another OS is one more directory here, not edits all over the tree.
//! - `types.rs`: the data both hand out (`proc::Stat`, `proc::Mount`, `cgroup::Usage`,
//!   `view::Entry`), defined once.
//!
//! What is the same on every Unix but was raw `libc` (the terminal's width) is in
//! [`term`].

#[cfg_attr(target_os = "linux", path = "linux/mod.rs")]
#[cfg_attr(not(target_os = "linux"), path = "other/mod.rs")]
mod os;

pub mod fdpass;
pub mod term;
mod types;

pub use os::MAX_SOCKET_PATH_BYTES;
pub use os::{
    cgroup, fs, git_cgroup, landlock, memory, no_sockets, peer, pidfd, pids, priority, proc,
    random, reflink, signal, subvolume, supervise, view, watch,
};

/// Set (test builds only), agents join their cgroup between fork and exec, as on
/// kernels before 5.7, instead of being born inside it; the daemon hands it to shims.
#[cfg(all(feature = "test-hooks", debug_assertions))]
pub const TEST_CGROUP_BY_JOINING: &str = "GROVE_TEST_CGROUP_BY_JOINING";

/// The name of this OS, for messages.
pub const OS: &str = std::env::consts::OS;

/// True where grove can run agents (the daemon and the shim refuse to start elsewhere).
pub const AGENTS_SUPPORTED: bool = cfg!(target_os = "linux");

/// The error of everything the seam cannot do on this OS.
pub fn unsupported(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("{what} is not supported on this OS ({OS}); grove runs agents on Linux only"),
    )
}

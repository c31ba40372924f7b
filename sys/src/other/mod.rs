//! Every other Unix: what POSIX allows, "not supported on this OS" for the rest (see
//! [`crate::unsupported`]). The signatures match `linux/` one for one.

pub mod fs;
pub mod landlock;
pub mod no_sockets;
pub mod peer;
pub mod pidfd;
pub mod proc;
pub mod random;
pub mod signal;
pub mod supervise;
pub mod watch;

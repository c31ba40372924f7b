//! Linux: the implementation grove runs on.

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

//! Starting shims and watching them end.

pub mod environment;
pub mod jail_paths;
pub mod launch;
pub mod procfs;
pub mod watch;

//! Starting shims and watching them end.

pub mod cli_trust;
pub mod environment;
pub mod jail_home;
pub mod jail_paths;
pub mod jail_view;
pub mod launch;
pub mod procfs;
pub mod users_git;
pub mod watch;

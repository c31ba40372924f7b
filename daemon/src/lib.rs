//! The grove daemon as a library: [`run`] serves until `shutdown` resolves or a client
//! asks it to stop. The `grove` binary wraps it in `grove daemon run`.

pub mod config;
mod console;
mod core;
mod db;
mod error;
mod events;
mod faults;
mod git;
mod ids;
mod instance;
mod janitor;
mod keyed;
mod metrics;
pub mod notify;
mod owner;
pub mod presets;
mod server;
mod sessions;
mod spawn_defaults;
mod supervisor;
mod toml_table;
mod worktree_root;
mod worktree_setup;

pub use config::Config;
pub use db::health::{
    check_log as check_database_log, pages_report, wal_path, LogCheck, RECOVER_ADVICE,
};
pub use db::recover::{recover as recover_database, Recovered, TableCopy};
pub use db::{quick_check as database_quick_check, DbError};
pub use error::Error;
pub use instance::{check_socket_dir, run, Ready};
pub use supervisor::jail_paths::probe as jail_probe;
pub use worktree_root::{measure as measure_disk, DiskUsage};

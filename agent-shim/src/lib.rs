//! The shim: the tiny process that holds one agent.
//!
//! The daemon starts it (as `grove-shim __shim`, or `grove __shim` when the separate
//! binary is missing; see [`ShimProgram`]) with the worktree as cwd, stdout and stderr
//! already pointing at the agent's log, and the [`ShimSpec`] as JSON on stdin. From then
//! on it needs nothing from the daemon: it runs the command, enforces the timeout,
//! kills whatever the command left behind and writes the [`ExitRecord`] atomically.
//! A daemon crash or restart never touches a running agent. `__shim setup` runs one
//! jailed setup command for the daemon instead ([`setup`]).

mod console;
mod descendants;
pub mod jail;
mod log;
mod program;
mod relay;
mod run;
mod runner;
pub mod setup;

pub use grove_proto::now_ms;
pub use grove_proto::shim::{
    read_exit_record, shim_path, ConsoleSpec, ExitRecord, JailSpec, LogSpec, ShimProgram, ShimSpec,
    ViewEntry, EXIT_RECORD_FILE, SHIM_ARG,
};
pub use grove_sys::cgroup;
pub use grove_sys::pids;
pub use program::{c_main, main};
pub use run::main_from_stdin;

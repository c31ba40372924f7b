//! What the daemon and a shim agree on: the spec a shim is started with, the program
//! it is, the exit record it leaves, and the setup helper's request and answer. The
//! daemon links none of the shim's code, only this.

mod program;
mod record;
mod setup;
mod spec;

pub use program::{shim_path, ShimProgram, SHIM_ARG};
pub use record::{read_exit_record, ExitRecord, EXIT_RECORD_FILE};
pub use setup::{SetupOutcome, SetupSpec, SETUP_ARG};
pub use spec::{ConsoleSpec, JailSpec, LogSpec, ShimSpec, ViewEntry};

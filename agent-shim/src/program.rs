//! Which program the daemon starts as a shim, and how a shim is started.
//!
//! Every running agent holds one shim for its whole life, so the shim is a binary of its
//! own (`grove-shim`, linking only this crate): a few hundred KiB of mapped code instead
//! of all of grove's. `grove __shim` does the same job and remains the fallback when the
//! separate binary is missing (a `grove` copied somewhere on its own).

use grove_proto::shim::SHIM_ARG;
use std::ffi::OsStr;
use std::process::ExitCode;

/// The `main` of `grove __shim`.
pub fn main() -> ExitCode {
    ExitCode::from(exit_code())
}

/// The C `main` of the shim binaries (`grove-shim`, the tests' `grove-e2e-shim`).
///
/// They are `#![no_main]`: Rust's runtime start-up finds the main thread's stack guard
/// through glibc's pthread_getattr_np, which parses /proc/self/maps with stdio and
/// scanf, and that alone maps about 350 KiB more of libc into every shim. The shim needs
/// nothing else from that start-up (its stdin, stdout and stderr are always open, and
/// `std::env::args` works without it on glibc) but SIGPIPE ignored, which it sets here as
/// std would; std's `Command` still gives the agent the default SIGPIPE.
pub fn c_main() -> libc::c_int {
    // SAFETY: setting a signal's disposition touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // A panic must not unwind into C: end with the code std gives a panicking main.
    std::panic::catch_unwind(exit_code).map_or(101, libc::c_int::from)
}

fn exit_code() -> u8 {
    if std::env::args_os().nth(1).as_deref() != Some(OsStr::new(SHIM_ARG)) {
        eprintln!(
            "grove-shim: this program holds one agent for the grove daemon, which starts it \
             (with `{SHIM_ARG}` and the agent's spec on stdin); it is not meant to be run by hand"
        );
        return 2;
    }
    let code = if std::env::args_os().nth(2).as_deref()
        == Some(OsStr::new(grove_proto::shim::SETUP_ARG))
    {
        crate::setup::main_from_stdin()
    } else {
        crate::main_from_stdin()
    };
    code.clamp(0, 255) as u8
}

//! The Landlock write jail, as the shim and the daemon's setup commands use it: a
//! [`JailSpec`] made into the ruleset of [`grove_sys::landlock`] (the platform seam).
//!
//! The shim builds the ruleset itself (it stays outside the jail, so it can still signal
//! and kill the whole tree), and the forked child enters it just before exec.

use crate::JailSpec;
pub use grove_sys::landlock::{describe_abi, kernel_abi, REQUIRED_ABI};
use std::io;

/// A built ruleset, ready for the child to enter.
#[derive(Debug)]
pub struct Jail(grove_sys::landlock::Jail);

impl Jail {
    /// Builds the ruleset. Fails, rather than degrading, when the kernel cannot enforce
    /// all of it (or has no Landlock at all).
    pub fn build(spec: &JailSpec) -> Result<Jail, String> {
        grove_sys::landlock::Jail::build(&spec.writable).map(Jail)
    }

    /// Puts the calling process in the jail. Async-signal-safe: meant for `pre_exec`,
    /// between fork and exec.
    pub fn enter(&self) -> io::Result<()> {
        self.0.enter()
    }
}

//! No child subreaper or no_new_privs here.

use std::io;

pub fn become_subreaper() -> io::Result<()> {
    Err(crate::unsupported(
        "keeping hold of orphaned descendants (a child subreaper)",
    ))
}

pub fn set_no_new_privs() -> io::Result<()> {
    Err(crate::unsupported("no_new_privs"))
}

/// No parent-death signal here: the child is left to run (the daemon refuses to start
/// on this OS anyway).
pub fn die_with_parent(_parent: u32) -> io::Result<()> {
    Ok(())
}

/// Finding processes by their environment needs /proc.
pub fn kill_marked(_entry: &[u8], _deadline: std::time::Instant) -> io::Result<usize> {
    Err(crate::unsupported("finding processes by their environment"))
}

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

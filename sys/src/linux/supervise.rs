//! Keeping hold of a process tree: the child subreaper (Linux 3.4) and no_new_privs.

use std::io;

/// Makes orphaned descendants of this process its children instead of init's, so a
/// shim can reap and kill what its agent left behind.
pub fn become_subreaper() -> io::Result<()> {
    Ok(nix::sys::prctl::set_child_subreaper(true)?)
}

/// No exec from here on gains privileges (setuid bits, file capabilities): Landlock
/// requires it of unprivileged callers. Async-signal-safe (one prctl).
pub fn set_no_new_privs() -> io::Result<()> {
    Ok(nix::sys::prctl::set_no_new_privs()?)
}

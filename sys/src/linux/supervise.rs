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

/// The calling process gets SIGKILL when the thread that started it ends, and does not
/// start at all when `parent` is already gone. For `pre_exec`: async-signal-safe (one
/// prctl, one getppid).
pub fn die_with_parent(parent: u32) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Err(io::Error::other("the parent is gone"));
    }
    Ok(())
}

//! No openat2 here (a port could walk with openat and O_NOFOLLOW one component at a
//! time); refused rather than done unsafely.

use nix::errno::Errno;
use nix::fcntl::OFlag;
use std::os::fd::{AsFd, OwnedFd};

pub fn open_beneath<Fd: AsFd>(_dir: Fd, _path: &str, _flags: OFlag) -> Result<OwnedFd, Errno> {
    Err(Errno::ENOSYS)
}

/// No syncfs here: every filesystem is written out instead (POSIX `sync`).
pub fn sync_filesystem<Fd: AsFd>(_dir: Fd) -> std::io::Result<()> {
    nix::unistd::sync();
    Ok(())
}

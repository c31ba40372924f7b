//! The peer's uid through getpeereid(3); the pid is not known here.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

pub fn credentials(socket: &impl AsFd) -> io::Result<(u32, Option<u32>)> {
    let (uid, _gid) = nix::unistd::getpeereid(socket)?;
    Ok((uid.as_raw(), None))
}

pub fn pidfd(_socket: &impl AsFd) -> io::Result<Option<OwnedFd>> {
    Ok(None)
}

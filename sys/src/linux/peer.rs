//! Who is at the other end of a unix socket, as the kernel recorded it.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// The uid and pid of the process that created or connected the peer socket
/// (SO_PEERCRED): beyond an impostor's reach, unlike anything read from the socket.
pub fn credentials(socket: &impl AsFd) -> io::Result<(u32, Option<u32>)> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(socket, PeerCredentials)?;
    Ok((
        cred.uid(),
        u32::try_from(cred.pid()).ok().filter(|&p| p > 0),
    ))
}

/// A pidfd for the peer (SO_PEERPIDFD, Linux 6.5): it keeps naming that process after
/// its pid is reused. `Ok(None)` on kernels that do not have it.
pub fn pidfd(socket: &impl AsFd) -> io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{getsockopt, sockopt::PeerPidfd};
    match getsockopt(socket, PeerPidfd) {
        Ok(fd) => Ok(Some(fd)),
        Err(nix::errno::Errno::ENOPROTOOPT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

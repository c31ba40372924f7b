//! Handing a file descriptor to the process at the other end of a Unix socket
//! (SCM_RIGHTS), through nix (portable across Unix).

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// Sends `bytes` with `fd` attached to them; returns how many bytes went (the rest is
/// the caller's to write as usual).
pub fn send_with_fd(socket: impl AsFd, bytes: &[u8], fd: impl AsFd) -> io::Result<usize> {
    let fds = [fd.as_fd().as_raw_fd()];
    let control = [ControlMessage::ScmRights(&fds)];
    let iov = [IoSlice::new(bytes)];
    sendmsg::<()>(
        socket.as_fd().as_raw_fd(),
        &iov,
        &control,
        MsgFlags::empty(),
        None,
    )
    .map_err(io::Error::from)
}

/// Reads into `buf`, keeping any descriptors that came with the bytes (close-on-exec).
pub fn recv_with_fds(socket: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let mut iov = [IoSliceMut::new(buf)];
    // Linux marks them close-on-exec as they arrive; elsewhere that is done just after.
    #[cfg(target_os = "linux")]
    let flags = MsgFlags::MSG_CMSG_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = MsgFlags::empty();
    let message = recvmsg::<()>(
        socket.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut space),
        flags,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for control in message.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = control {
            // SAFETY: the kernel just installed these descriptors in this process for
            // us; nothing else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    for fd in &fds {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok((message.bytes, fds))
}

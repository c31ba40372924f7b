//! The daemon's connections to the console socket. Only the process that holds the
//! daemon's lock is served: the socket's directory is the user's, but an agent runs as
//! the user too and must not type into another agent's terminal.

use super::terminal::Terminal;
use grove_proto::console::{FromShim, ToShim};
use nix::poll::PollFlags;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// True when the peer is the running daemon: the kernel's record of who connected
/// against the holder of the daemon's lock. The check runs as the connection is
/// accepted, while the daemon lives, so no other live process can have its pid.
pub fn is_the_daemon(stream: &UnixStream) -> bool {
    let Ok((uid, Some(pid))) = grove_sys::peer::credentials(stream) else {
        return false;
    };
    if uid != nix::unistd::getuid().as_raw() {
        return false;
    }
    let Some(daemon) = crate::descendants::spared_pid() else {
        return false;
    };
    pid == daemon as u32
}

pub struct Peer {
    stream: UnixStream,
    inbox: Vec<u8>,
    outbox: Vec<u8>,
    /// Descriptors that came with the requests, for the next that takes one.
    pub fds: Vec<OwnedFd>,
    /// Receives every byte of output (attach).
    pub watching: bool,
    /// The viewer's own terminal, written and read by the shim itself.
    pub terminal: Option<Terminal>,
    /// Receives activity changes (the daemon's monitor).
    pub activity: bool,
    pub closed: bool,
}

impl Peer {
    pub fn new(stream: UnixStream) -> io::Result<Peer> {
        stream.set_nonblocking(true)?;
        Ok(Peer {
            stream,
            inbox: Vec::new(),
            outbox: Vec::new(),
            fds: Vec::new(),
            watching: false,
            terminal: None,
            activity: false,
            closed: false,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    pub fn interest(&self) -> PollFlags {
        if self.outbox.is_empty() {
            PollFlags::POLLIN
        } else {
            PollFlags::POLLIN | PollFlags::POLLOUT
        }
    }

    pub fn backlog(&self) -> usize {
        self.outbox.len() + self.terminal.as_ref().map_or(0, Terminal::backlog)
    }

    pub fn send(&mut self, message: &FromShim) {
        message.encode(&mut self.outbox);
    }

    /// Reads what is there and returns the complete requests; an error ends the peer.
    pub fn receive(&mut self) -> io::Result<Vec<ToShim>> {
        let mut buf = [0u8; 16 << 10];
        loop {
            match grove_sys::fdpass::recv_with_fds(&self.stream, &mut buf) {
                Ok((0, _)) => {
                    self.closed = true;
                    break;
                }
                Ok((n, fds)) => {
                    self.fds.extend(fds);
                    self.inbox.extend_from_slice(&buf[..n]);
                    // A short read took all there was: poll says when more comes, and
                    // a key's turn saves the read that would only say "nothing".
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let mut requests = Vec::new();
        while let Some(request) = ToShim::decode(&mut self.inbox).map_err(io::Error::other)? {
            requests.push(request);
        }
        Ok(requests)
    }

    pub fn flush(&mut self) {
        while !self.outbox.is_empty() {
            match self.stream.write(&self.outbox) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }
}

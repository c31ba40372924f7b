//! A viewer's own terminal, handed over by `grove attach` (`ToShim::WatchTerminal`):
//! the shim writes the agent's output straight to it and reads the keys typed on it,
//! as tmux's server does with its clients' terminals. A keystroke and its echo then
//! pass through no process but the shim.
//!
//! The descriptor is one `grove attach` opened for us (its own open file description),
//! so making it non-blocking here leaves the viewer's shell alone.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a terminal that is not reading (Ctrl-S, a stuck emulator) may hold up the
/// shim's goodbye: after that, what is left unwritten is dropped.
const LAST_WRITE: Duration = Duration::from_secs(1);

pub struct Terminal {
    file: File,
    outbox: Vec<u8>,
    read_only: bool,
    detach: u8,
}

/// What the keys read from a terminal come to.
pub struct Typed {
    /// For the agent (none for a read-only viewer).
    pub keys: Vec<u8>,
    /// The detach key came (or, for a read-only viewer, Ctrl-C).
    pub detach: bool,
    /// The terminal hung up: nobody is there any more.
    pub gone: bool,
}

impl Terminal {
    pub fn new(fd: OwnedFd, read_only: bool, detach: u8) -> io::Result<Terminal> {
        super::set_nonblocking(&fd)?;
        Ok(Terminal {
            file: File::from(fd),
            outbox: Vec::new(),
            read_only,
            detach,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    pub fn backlog(&self) -> usize {
        self.outbox.len()
    }

    /// Queues `bytes` and writes what the terminal takes now.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.outbox.extend_from_slice(bytes);
        self.flush()
    }

    /// Writes what the terminal takes without waiting; an error means it is gone.
    pub fn flush(&mut self) -> io::Result<()> {
        while !self.outbox.is_empty() {
            match self.file.write(&self.outbox) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes what is still owed, waiting for the terminal at most [`LAST_WRITE`].
    pub fn finish(&mut self) {
        let deadline = Instant::now() + LAST_WRITE;
        while !self.outbox.is_empty() && Instant::now() < deadline {
            if self.flush().is_err() {
                return;
            }
            if self.outbox.is_empty() {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fds = [nix::poll::PollFd::new(
                self.file.as_fd(),
                nix::poll::PollFlags::POLLOUT,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).is_err() {
                return;
            }
        }
    }

    /// Reads what was typed.
    pub fn read(&mut self) -> Typed {
        let mut buf = [0u8; 4096];
        let n = loop {
            match self.file.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Typed {
                        keys: Vec::new(),
                        detach: false,
                        gone: false,
                    }
                }
                Err(_) => break 0,
            }
        };
        if n == 0 {
            return Typed {
                keys: Vec::new(),
                detach: false,
                gone: true,
            };
        }
        let typed = &buf[..n];
        // Ctrl-C leaves a read-only view too: nothing would reach the agent anyway.
        let stop = typed
            .iter()
            .position(|&k| k == self.detach || (self.read_only && k == 0x03));
        let keys = if self.read_only {
            Vec::new()
        } else {
            typed[..stop.unwrap_or(n)].to_vec()
        };
        Typed {
            keys,
            detach: stop.is_some(),
            gone: false,
        }
    }
}

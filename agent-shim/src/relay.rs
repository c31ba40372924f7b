//! A headless agent's output: its stdout and stderr are a pipe the shim copies into
//! the log, so that the log's budget (`log_max`) holds. Were they the log file itself,
//! nothing could keep one agent printing as fast as it can from filling the disk.
//!
//! On the shim's one thread: [`Relay::wait`] polls the supervised signals beside the
//! pipe, as the console does with its terminal.

use crate::log::Log;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

const READ_CHUNK: usize = 64 << 10;

pub struct Relay {
    output: File,
    log: Log,
    buf: Box<[u8]>,
    /// Every writer closed the pipe: nothing more to read.
    closed: bool,
    signals: grove_sys::signal::SignalFd,
}

impl Relay {
    /// The relay, and the pipe's end to give the agent as stdout and stderr.
    pub fn open(log: Log, signals: &SigSet) -> io::Result<(Relay, OwnedFd)> {
        let (read, write) = nix::unistd::pipe()?;
        let flags = nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        let relay = Relay {
            output: File::from(read),
            log,
            buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            closed: false,
            signals: grove_sys::signal::SignalFd::new(signals)?,
        };
        Ok((relay, write))
    }

    /// Waits up to `timeout` (forever: `None`) for one of the supervised signals,
    /// copying output meanwhile.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Option<Signal> {
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(signal) = self.signals.take() {
                return Some(signal);
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) {
                return None;
            }
            let left = until.map(|u| u - now);
            let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            if !self.closed {
                fds.push(PollFd::new(self.output.as_fd(), PollFlags::POLLIN));
            }
            let timeout = left.map_or(PollTimeout::NONE, |t| {
                // Round up: waking a moment early would only spin.
                let ms = t.as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            });
            if poll(&mut fds, timeout).is_err() {
                continue;
            }
            let output_ready = fds
                .get(1)
                .and_then(|fd| fd.revents())
                .is_some_and(|r| !r.is_empty());
            drop(fds);
            if output_ready {
                self.copy();
            }
        }
    }

    /// Copies what the pipe still holds, after the whole tree is gone.
    pub fn drain(&mut self) {
        while !self.closed && self.copy() {}
    }

    /// One read of the pipe into the log; false when there was nothing (more).
    fn copy(&mut self) -> bool {
        match nix::unistd::read(&self.output, &mut self.buf) {
            Ok(0) => {
                self.closed = true;
                false
            }
            Ok(n) => {
                self.log.write(&self.buf[..n]);
                true
            }
            Err(nix::errno::Errno::EINTR) => true,
            Err(_) => false,
        }
    }
}

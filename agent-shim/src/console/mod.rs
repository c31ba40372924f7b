//! The agent's console: the pseudo terminal (`--tty`) or kept-open stdin (`--stdin`)
//! the shim holds for the agent's whole life, so that it survives a daemon crash like
//! the agent does. The daemon reaches it through a socket beside the exit record
//! (grove_proto::console); every byte of output also goes to the log, and a terminal
//! model (the `vt100` crate: a small, maintained VT parser with the screen diffing
//! and redraw sequences attach needs) keeps the current screen.
//!
//! Everything runs on the shim's one thread: [`Console::wait`] polls the signals the
//! shim supervises together with the terminal and the daemon's connections.

mod answers;
mod filter;
mod peers;
mod terminal;
mod waiting;

use crate::log::Log;
use crate::ConsoleSpec;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::types::TtySize;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use peers::Peer;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use waiting::Waiting;

/// A peer whose unread output grows past this is too slow to follow and is dropped
/// (the daemon reads as fast as its viewers; one stuck viewer must not stall the agent).
const MAX_PEER_BACKLOG: usize = 16 << 20;
const READ_CHUNK: usize = 64 << 10;

/// What the agent's stdio is made of: hand these to the child.
pub struct AgentStdio {
    /// `None`: the input piped into `grove spawn`, or nothing.
    pub stdin: Option<OwnedFd>,
    /// Where stdout and stderr go: the terminal, or a pipe the shim copies into the
    /// log; `None`: the shim's own (the log).
    pub output: Option<OwnedFd>,
    /// `output` is a terminal, to become the agent's controlling terminal.
    pub terminal: bool,
}

enum Io {
    Tty {
        master: File,
        screen: Box<vt100::Parser>,
        size: TtySize,
        /// The device number of the agent's side, to know reads of it in /proc.
        device: u64,
    },
    Pipe {
        stdin: Option<File>,
        /// The agent's stdout and stderr, to copy into the log (`None`: they are the
        /// log file itself).
        output: Option<File>,
    },
}

pub struct Console {
    io: Io,
    socket: PathBuf,
    listener: UnixListener,
    peers: Vec<Peer>,
    log: Log,
    /// Input not yet taken by the terminal or pipe.
    pending_input: Vec<u8>,
    /// One buffer for every read of the terminal: no allocation on an echo's way.
    read_buf: Box<[u8]>,
    /// What of the output viewers may see (see `filter`), kept across reads.
    filter: filter::Filter,
    /// The filtered output of one read, and the queries it held.
    viewed: Vec<u8>,
    queries: Vec<filter::Dropped>,
    /// The agent's side is closed by every process (EIO/EOF): nothing more to read.
    output_closed: bool,
    waiting: Waiting,
    signals: grove_sys::signal::SignalFd,
    /// The signal descriptor may hold a signal: read it only then, not on every turn
    /// (a keystroke's turn is a few system calls; this was one of them).
    signal_ready: bool,
}

impl Console {
    /// Opens the terminal (or pipe) and the socket, before the agent starts. With
    /// `relay`, a kept-open stdin's agent writes its output into a pipe that the
    /// console copies into `log`, so the log's budget holds.
    pub fn open(
        spec: &ConsoleSpec,
        signals: &SigSet,
        log: Log,
        relay: bool,
    ) -> io::Result<(Console, AgentStdio)> {
        let (io, stdio) = match spec.tty {
            Some(size) => {
                let pty = grove_sys::term::open_pty(size.rows, size.cols)?;
                let device = grove_sys::term::agent_side_device(&pty.agent)?;
                let output = pty.agent.try_clone()?;
                set_nonblocking(&pty.master)?;
                let io = Io::Tty {
                    master: File::from(pty.master),
                    screen: Box::new(vt100::Parser::new(
                        nonzero(size.rows),
                        nonzero(size.cols),
                        0,
                    )),
                    size,
                    device,
                };
                let stdio = AgentStdio {
                    stdin: Some(pty.agent),
                    output: Some(output),
                    terminal: true,
                };
                (io, stdio)
            }
            None => {
                let (read, write) = nix::unistd::pipe()?;
                set_nonblocking(&write)?;
                let (output, agent_output) = match relay {
                    true => {
                        let (read, write) = nix::unistd::pipe()?;
                        set_nonblocking(&read)?;
                        (Some(File::from(read)), Some(write))
                    }
                    false => (None, None),
                };
                let io = Io::Pipe {
                    stdin: Some(File::from(write)),
                    output,
                };
                let stdio = AgentStdio {
                    stdin: Some(read),
                    output: agent_output,
                    terminal: false,
                };
                (io, stdio)
            }
        };
        // A socket left by an earlier shim of this agent (a restart) is stale.
        let _ = std::fs::remove_file(&spec.socket);
        let listener = UnixListener::bind(&spec.socket)?;
        listener.set_nonblocking(true)?;
        let console = Console {
            io,
            socket: spec.socket.clone(),
            listener,
            peers: Vec::new(),
            log,
            pending_input: Vec::new(),
            read_buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            filter: filter::Filter::new(spec.attach_links, spec.attach_title),
            viewed: Vec::with_capacity(READ_CHUNK),
            queries: Vec::new(),
            output_closed: false,
            // Without a terminal there is nothing to watch the agent read: it can say
            // itself (`grove status waiting`).
            waiting: match spec.tty {
                Some(_) => Waiting::new(Duration::from_millis(spec.waiting_after_ms)),
                None => Waiting::never(),
            },
            signals: grove_sys::signal::SignalFd::new(signals)?,
            signal_ready: true,
        };
        Ok((console, stdio))
    }

    /// Input for the agent before anyone types (what was piped into `grove spawn`).
    pub fn queue_input(&mut self, bytes: Vec<u8>) {
        self.pending_input.extend_from_slice(&bytes);
    }

    /// Waits up to `timeout` (forever: `None`) for one of the supervised signals,
    /// serving the terminal and the daemon meanwhile.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Option<Signal> {
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            if std::mem::take(&mut self.signal_ready) {
                if let Some(signal) = self.signals.take() {
                    // Another may be pending behind it.
                    self.signal_ready = true;
                    return Some(signal);
                }
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) {
                return None;
            }
            if self.waiting.due(now) {
                self.check_waiting(now);
            }
            let wake = [until, self.waiting.next_check()]
                .into_iter()
                .flatten()
                .min();
            self.poll_once(wake.map(|w| w.saturating_duration_since(now)));
        }
    }

    /// Reads what the agent's side still had, after the whole tree is gone.
    pub fn drain(&mut self) {
        while !self.output_closed && self.read_output() {}
        // The viewers' terminals get all of it before their attach hears the end.
        for terminal in self.peers.iter_mut().filter_map(|p| p.terminal.as_mut()) {
            terminal.finish();
        }
        self.flush_peers();
    }

    fn poll_once(&mut self, timeout: Option<Duration>) {
        let mut fds = vec![
            PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
        ];
        let io_fd = match &self.io {
            Io::Tty { master, .. } => Some(master.as_fd()),
            Io::Pipe { stdin, .. } => stdin.as_ref().map(|s| s.as_fd()),
        };
        let mut io_events = PollFlags::empty();
        if matches!(self.io, Io::Tty { .. }) && !self.output_closed {
            io_events |= PollFlags::POLLIN;
        }
        if !self.pending_input.is_empty() {
            io_events |= PollFlags::POLLOUT;
        }
        let io_index = io_fd.filter(|_| !io_events.is_empty()).map(|fd| {
            fds.push(PollFd::new(fd, io_events));
            fds.len() - 1
        });
        let output_index = match &self.io {
            Io::Pipe {
                output: Some(output),
                ..
            } if !self.output_closed => {
                fds.push(PollFd::new(output.as_fd(), PollFlags::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let first_peer = fds.len();
        for peer in &self.peers {
            fds.push(PollFd::new(peer.fd(), peer.interest()));
        }
        let first_terminal = fds.len();
        let mut terminals = Vec::new();
        for (index, peer) in self.peers.iter().enumerate() {
            if let Some(terminal) = &peer.terminal {
                let mut interest = PollFlags::POLLIN;
                if terminal.backlog() > 0 {
                    interest |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(terminal.fd(), interest));
                terminals.push(index);
            }
        }
        let timeout = timeout.map_or(PollTimeout::NONE, |t| {
            // Round up: waking a moment early would only spin.
            let ms = t.as_nanos().div_ceil(1_000_000);
            PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
        });
        if poll(&mut fds, timeout).is_err() {
            // EINTR or worse: look at the signals on the next turn rather than miss one.
            self.signal_ready = true;
            return;
        }
        let ready = |fd: &PollFd<'_>| fd.revents().unwrap_or(PollFlags::empty());
        self.signal_ready = !ready(&fds[0]).is_empty();
        let listener_ready = !ready(&fds[1]).is_empty();
        let io_ready = io_index
            .map(|i| ready(&fds[i]))
            .unwrap_or(PollFlags::empty());
        let output_ready = output_index.is_some_and(|i| !ready(&fds[i]).is_empty());
        let peers_ready: Vec<PollFlags> =
            fds[first_peer..first_terminal].iter().map(ready).collect();
        let terminals_ready: Vec<(usize, PollFlags)> = terminals
            .into_iter()
            .zip(fds[first_terminal..].iter().map(ready))
            .filter(|(_, flags)| !flags.is_empty())
            .collect();
        drop(fds);
        // Keys first: a keystroke's turn goes to the agent before anything else.
        for (index, flags) in terminals_ready {
            self.serve_terminal(index, flags);
        }
        if matches!(self.io, Io::Tty { .. })
            && io_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
        {
            self.read_output();
        }
        if output_ready {
            self.read_output();
        }

        if io_ready.contains(PollFlags::POLLOUT) || io_ready.contains(PollFlags::POLLERR) {
            self.write_input();
        }
        for (index, flags) in peers_ready.into_iter().enumerate().rev() {
            if !flags.is_empty() {
                self.serve_peer(index, flags);
            }
        }
        if listener_ready {
            self.accept();
        }
        self.flush_peers();
    }

    /// One read of the terminal: to the log, the screen and every watcher. False when
    /// there was nothing (more) to read.
    fn read_output(&mut self) -> bool {
        let buf = &mut self.read_buf;
        let (master, screen) = match &mut self.io {
            Io::Tty { master, screen, .. } => (&*master, screen),
            Io::Pipe {
                output: Some(output),
                ..
            } => {
                // Output of a kept-open stdin's agent goes to the log only, as it did
                // when it was the log file itself.
                return match nix::unistd::read(&*output, buf) {
                    Ok(0) => {
                        self.output_closed = true;
                        false
                    }
                    Ok(n) => {
                        self.log.write(&buf[..n]);
                        true
                    }
                    Err(_) => false,
                };
            }
            Io::Pipe { output: None, .. } => return false,
        };
        let n = match nix::unistd::read(master, buf) {
            Ok(0) | Err(nix::errno::Errno::EIO) => {
                // Every process closed its side: output is over.
                self.output_closed = true;
                return false;
            }
            Ok(n) => n,
            Err(_) => return false,
        };
        let bytes = &buf[..n];
        self.viewed.clear();
        self.filter.feed(bytes, &mut self.viewed, &mut self.queries);
        let viewed = &self.viewed[..];
        // Viewers first: an echo is on its way before the log and the screen model
        // have seen it.
        let mut frame = None;
        for peer in self
            .peers
            .iter_mut()
            .filter(|p| p.watching && !viewed.is_empty())
        {
            match &mut peer.terminal {
                Some(terminal) => {
                    if terminal.write(viewed).is_err() {
                        peer.closed = true;
                    }
                }
                None => {
                    peer.send(frame.get_or_insert_with(|| FromShim::Output(viewed.to_vec())));
                    peer.flush();
                }
            }
        }
        self.log.write(bytes);
        // The screen is brought up to each query, so that a cursor position is the one
        // the agent asked about.
        let mut done = 0;
        let mut answered = false;
        for query in self.queries.drain(..) {
            screen.process(&bytes[done..query.end]);
            done = query.end;
            if let Some(answer) = answers::answer(&query.bytes, screen.screen()) {
                self.pending_input.extend_from_slice(&answer);
                answered = true;
            }
        }
        screen.process(&bytes[done..]);
        if answered {
            self.write_input();
        }
        if self.waiting.output(Instant::now()) {
            self.broadcast_activity(false);
        }
        true
    }

    fn write_input(&mut self) {
        let target = match &self.io {
            Io::Tty { master, .. } => master,
            Io::Pipe {
                stdin: Some(stdin), ..
            } => stdin,
            Io::Pipe { stdin: None, .. } => {
                self.pending_input.clear();
                return;
            }
        };
        while !self.pending_input.is_empty() {
            match nix::unistd::write(target, &self.pending_input) {
                Ok(n) => {
                    self.pending_input.drain(..n);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return,
                // The reader is gone (EPIPE, EIO): nobody will ever take it.
                Err(_) => {
                    self.pending_input.clear();
                    return;
                }
            }
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if peers::is_the_daemon(&stream) {
                        if let Ok(peer) = Peer::new(stream) {
                            self.peers.push(peer);
                        }
                    }
                    // Anything else (an agent dialling the socket) is closed unheard.
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    fn serve_peer(&mut self, index: usize, flags: PollFlags) {
        if flags.contains(PollFlags::POLLOUT) {
            self.peers[index].flush();
        }
        if flags.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            match self.peers[index].receive() {
                Ok(requests) => {
                    for request in requests {
                        self.handle(index, request);
                    }
                }
                Err(_) => self.peers[index].closed = true,
            }
        }
        if self.peers[index].closed {
            self.peers.swap_remove(index);
        }
    }

    fn handle(&mut self, index: usize, request: ToShim) {
        let answer = match request {
            ToShim::Keys(bytes) => {
                // Refused keys have nobody to tell: the viewer sees the terminal closed.
                let _ = self.input(bytes);
                return;
            }
            ToShim::Input(bytes) => self.input(bytes),
            ToShim::Resize(size) => self.resize(size),
            ToShim::Screen { ansi } => self.screen(ansi),
            ToShim::WatchTerminal { read_only, detach } => {
                match self.watch_terminal(index, read_only, detach) {
                    Ok(()) => return,
                    Err(refusal) => refusal,
                }
            }
            ToShim::Watch => match self.snapshot() {
                Ok(snapshot) => {
                    self.peers[index].watching = true;
                    snapshot
                }
                Err(refusal) => refusal,
            },
            ToShim::Activity => {
                self.peers[index].activity = true;
                FromShim::Activity(self.waiting.is_waiting())
            }
            ToShim::CloseInput => match &mut self.io {
                Io::Pipe { stdin, .. } => {
                    *stdin = None;
                    self.pending_input.clear();
                    FromShim::Accepted(0)
                }
                Io::Tty { .. } => FromShim::Refused(
                    "the agent reads a terminal: send Ctrl-D (\\x04) to end its input".into(),
                ),
            },
        };
        self.peers[index].send(&answer);
    }

    /// Takes the viewer's terminal that came with the request and draws the screen on
    /// it; from now on output goes to it and keys come from it.
    fn watch_terminal(
        &mut self,
        index: usize,
        read_only: bool,
        detach: u8,
    ) -> Result<(), FromShim> {
        let FromShim::Snapshot { data, .. } = self.snapshot()? else {
            return Err(no_terminal());
        };
        let peer = &mut self.peers[index];
        if peer.fds.is_empty() {
            return Err(FromShim::Refused(
                "no terminal came with the request to draw on".into(),
            ));
        }
        let fd = peer.fds.remove(0);
        let mut terminal = terminal::Terminal::new(fd, read_only, detach)
            .map_err(|e| FromShim::Refused(format!("cannot use the viewer's terminal: {e}")))?;
        if terminal.write(&data).is_err() {
            return Err(FromShim::Refused("the viewer's terminal is gone".into()));
        }
        peer.terminal = Some(terminal);
        peer.watching = true;
        Ok(())
    }

    /// Keys typed on a viewer's terminal, or its detach key, or its hang-up.
    fn serve_terminal(&mut self, index: usize, flags: PollFlags) {
        let Some(terminal) = self.peers[index].terminal.as_mut() else {
            return;
        };
        if flags.contains(PollFlags::POLLOUT) && terminal.flush().is_err() {
            self.peers[index].closed = true;
            return;
        }
        if !flags.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            return;
        }
        let typed = terminal.read();
        if !typed.keys.is_empty() {
            let _ = self.input(typed.keys);
        }
        let peer = &mut self.peers[index];
        if typed.gone {
            peer.closed = true;
        } else if typed.detach {
            if let Some(mut terminal) = peer.terminal.take() {
                terminal.finish();
            }
            peer.watching = false;
            peer.send(&FromShim::Detached);
        }
    }

    fn input(&mut self, bytes: Vec<u8>) -> FromShim {
        match &self.io {
            Io::Pipe { stdin: None, .. } => {
                return FromShim::Refused("the agent's stdin is already closed".into())
            }
            Io::Tty { .. } if self.output_closed => {
                return FromShim::Refused("the agent's terminal is closed".into())
            }
            _ => {}
        }
        let accepted = bytes.len() as u64;
        self.pending_input.extend_from_slice(&bytes);
        self.write_input();
        // Typing is an answer: whatever the agent waited for, it now has.
        if self.waiting.input(Instant::now()) {
            self.broadcast_activity(false);
        }
        FromShim::Accepted(accepted)
    }

    fn resize(&mut self, new: TtySize) -> FromShim {
        let Io::Tty {
            master,
            screen,
            size,
            ..
        } = &mut self.io
        else {
            return FromShim::Refused("the agent has no terminal to resize".into());
        };
        if new.rows == 0 || new.cols == 0 {
            return FromShim::Refused(format!("cannot resize to {}x{}", new.cols, new.rows));
        }
        if let Err(e) = grove_sys::term::set_size(&*master, new.rows, new.cols) {
            return FromShim::Refused(format!("cannot resize the terminal: {e}"));
        }
        screen
            .screen_mut()
            .set_size(nonzero(new.rows), nonzero(new.cols));
        *size = new;
        FromShim::Accepted(0)
    }

    fn screen(&self, ansi: bool) -> FromShim {
        let Io::Tty { screen, size, .. } = &self.io else {
            return no_terminal();
        };
        let screen = screen.screen();
        let text = if ansi {
            screen.contents_formatted()
        } else {
            screen.contents()
        };
        FromShim::Screen {
            size: *size,
            cursor: screen.cursor_position(),
            text: text.into_bytes(),
        }
    }

    /// Keeps the screen as the agent left it in `path` (written whole, then renamed, so
    /// a reader never sees half of it). Without a terminal there is nothing to keep.
    pub fn keep_last_screen(&self, path: &std::path::Path) -> io::Result<()> {
        let Io::Tty { screen, size, .. } = &self.io else {
            return Ok(());
        };
        let screen = screen.screen();
        let last = grove_proto::console::LastScreen {
            size: *size,
            cursor: screen.cursor_position(),
            text: screen.contents(),
            ansi: screen.contents_formatted(),
        };
        let bytes = serde_json::to_vec(&last).map_err(io::Error::other)?;
        let partial = path.with_extension("json.tmp");
        std::fs::write(&partial, bytes)?;
        std::fs::rename(&partial, path)
    }

    fn snapshot(&self) -> Result<FromShim, FromShim> {
        let Io::Tty { screen, size, .. } = &self.io else {
            return Err(no_terminal());
        };
        Ok(FromShim::Snapshot {
            size: *size,
            data: screen.screen().state_formatted().into_bytes(),
        })
    }

    fn check_waiting(&mut self, now: Instant) {
        let Io::Tty { master, device, .. } = &self.io else {
            self.waiting.checked(now, false);
            return;
        };
        let waiting = grove_sys::term::foreground_group(master)
            .is_some_and(|group| waiting::group_reads_terminal(group, *device));
        if self.waiting.checked(now, waiting) {
            self.broadcast_activity(true);
        }
    }

    fn broadcast_activity(&mut self, waiting: bool) {
        let frame = FromShim::Activity(waiting);
        for peer in self.peers.iter_mut().filter(|p| p.activity) {
            peer.send(&frame);
        }
    }

    fn flush_peers(&mut self) {
        for peer in &mut self.peers {
            peer.flush();
            if peer.backlog() > MAX_PEER_BACKLOG {
                if peer.terminal.take().is_some() {
                    // Said, so that attach does not take the closed socket for the end.
                    peer.send(&FromShim::Refused(
                        "this terminal fell too far behind the agent's output; attach again".into(),
                    ));
                    peer.flush();
                }
                peer.closed = true;
            }
        }
        self.peers.retain(|p| !p.closed);
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn nonzero(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).unwrap_or(std::num::NonZeroU16::MIN)
}

fn no_terminal() -> FromShim {
    FromShim::Refused(
        "the agent has no terminal (it was spawned without --tty): there is no screen".into(),
    )
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

//! `grove attach`: this terminal becomes a view of the agent's. Keys go to the agent
//! (in raw mode, so Ctrl-C and arrows reach it), its output comes back, the window
//! size follows this terminal. The detach key leaves the agent running; when the agent
//! ends, its outcome is printed and the exit code is `grove wait`'s.
//!
//! The daemon checks who may attach, then hands over a connection to the agent's
//! console (`agent.attach` with `direct`): keys and output then go between this
//! process and the agent's shim alone, one hop like tmux, and an attach rides out a
//! daemon restart.

use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use anyhow::{anyhow, bail, Context, Result};
use grove_proto::console::{FromShim, ToShim};
use grove_proto::methods::{Attach, AttachParams};
use grove_proto::types::TtySize;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

/// On the way in, this terminal's own screen is kept (the alternate screen) and
/// cleared; on the way out the modes an agent may have switched on are switched off.
const ENTER_SCREEN: &[u8] = b"\x1b[?1049h\x1b[H\x1b[2J";
const LEAVE_SCREEN: &[u8] =
    b"\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1l\x1b>\x1b[?25h\x1b[0m\x1b[?1049l";

pub fn run(id: &str, read_only: bool, detach_key: &str) -> Result<ExitCode> {
    let detach = parse_detach_key(detach_key)?;
    let interactive = std::io::stdin().is_terminal();
    // Blocked so that window changes arrive on the signal descriptor the loop polls.
    let winch = SigSet::from(Signal::SIGWINCH);
    winch.thread_block().context("blocking SIGWINCH")?;
    // Where the OS has no signalfd, the size is set once and does not follow.
    let resizes = (!read_only)
        .then(|| grove_sys::signal::SignalFd::new(&winch).ok())
        .flatten();
    let dirs = dirs()?;
    let mut client = connect(&dirs)?;
    let (attached, console) = client.call_receiving_fd::<Attach>(&AttachParams {
        id: id.into(),
        read_only,
        size: None,
        direct: true,
    })?;
    let agent = attached.id.clone();
    let console = UnixStream::from(
        console.ok_or_else(|| anyhow!("the daemon answered without handing over the terminal"))?,
    );
    // The daemon's end was non-blocking (tokio); ours blocks: the loop reads only
    // what poll said is there.
    console.set_nonblocking(false)?;
    // On a terminal, the shim draws on it and reads its keys itself (as tmux's server
    // does): a keystroke and its echo then pass through no process but the shim.
    // Elsewhere (a pipe) output comes through here.
    let own_terminal = interactive.then(own_terminal).flatten();
    let mut view = View {
        console,
        resizes,
        detach,
        read_only,
        interactive,
        stdin_open: own_terminal.is_none(),
    };
    if let (Some(size), false) = (this_terminal_size(), read_only) {
        view.send(&ToShim::Resize(size))?;
    }
    eprintln!(
        "grove: attached to {agent}{}; detach with {detach_key}",
        if read_only { " (read-only)" } else { "" }
    );
    let raw = if interactive {
        Some(grove_sys::term::RawMode::enter(std::io::stdin()).context("raw mode")?)
    } else {
        None
    };
    let mut out = std::io::stdout().lock();
    out.write_all(ENTER_SCREEN)?;
    out.flush()?;
    match own_terminal {
        Some(terminal) => view.hand_over(terminal)?,
        None => view.send(&ToShim::Watch)?,
    }
    let ended = view.relay(&mut out);
    out.write_all(LEAVE_SCREEN)?;
    out.flush()?;
    drop(out);
    drop(raw);
    match ended? {
        Ended::Detached => {
            eprintln!(
                "grove: detached from {agent}; it keeps running (`grove attach {agent}` again)"
            );
            Ok(ExitCode::SUCCESS)
        }
        // The terminal closed: the agent ended (or its shim died).
        Ended::Closed => super::wait::outcome(&dirs, &agent),
    }
}

enum Ended {
    /// The detach key: the agent runs on.
    Detached,
    /// The console closed: the agent ended or its shim is gone.
    Closed,
}

/// One attached view, served on one thread by one poll, as tmux's client is: a key
/// goes out and its echo comes back without a hand-over between threads.
struct View {
    console: UnixStream,
    resizes: Option<grove_sys::signal::SignalFd>,
    detach: u8,
    read_only: bool,
    interactive: bool,
    /// False once this terminal's input ended (a pipe at its end): output still flows.
    stdin_open: bool,
}

impl View {
    /// The agent's screen, then its output, to `out` until the console closes or the
    /// detach key is typed; keys and window changes go the other way meanwhile.
    fn relay(&mut self, out: &mut impl Write) -> Result<Ended> {
        let mut pending = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let (console_ready, stdin_ready, resized) = self.poll()?;
            if resized {
                self.follow_size()?;
            }
            if stdin_ready {
                if let Some(ended) = self.forward_keys(&mut chunk)? {
                    return Ok(ended);
                }
            }
            if console_ready {
                match self.console.read(&mut chunk) {
                    Ok(0) => return Ok(Ended::Closed),
                    Ok(n) => pending.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // The shim is gone.
                    Err(_) => return Ok(Ended::Closed),
                }
                while let Some(message) = FromShim::decode(&mut pending)? {
                    match message {
                        FromShim::Snapshot { data, .. } | FromShim::Output(data) => {
                            out.write_all(&data)?;
                            out.flush()?;
                        }
                        FromShim::Refused(why) => bail!("{why}"),
                        FromShim::Detached => return Ok(Ended::Detached),
                        _ => {}
                    }
                }
            }
        }
    }

    /// Waits for the console, this terminal's keys or a window change.
    fn poll(&self) -> Result<(bool, bool, bool)> {
        let stdin = std::io::stdin();
        let mut fds = vec![PollFd::new(self.console.as_fd(), PollFlags::POLLIN)];
        if self.stdin_open {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        if let Some(resizes) = &self.resizes {
            fds.push(PollFd::new(resizes.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("waiting for the terminal"),
        }
        let ready = |fd: Option<&PollFd<'_>>| {
            fd.and_then(PollFd::revents)
                .is_some_and(|flags| !flags.is_empty())
        };
        let console = ready(fds.first());
        let stdin = self.stdin_open && ready(fds.get(1));
        let resized = self.resizes.is_some() && ready(fds.last());
        Ok((console, stdin, resized))
    }

    /// One read of this terminal: keys to the agent, up to the detach key.
    fn forward_keys(&mut self, buf: &mut [u8]) -> Result<Option<Ended>> {
        let n = match std::io::stdin().lock().read(buf) {
            Ok(0) | Err(_) => {
                self.stdin_open = false;
                return Ok(None);
            }
            Ok(n) => n,
        };
        let keys = &buf[..n];
        // Ctrl-C leaves a read-only view too: nothing would reach the agent anyway.
        let stop = keys
            .iter()
            .position(|&k| k == self.detach || (self.read_only && self.interactive && k == 0x03));
        let typed = &keys[..stop.unwrap_or(keys.len())];
        if !self.read_only && !typed.is_empty() && self.send(&ToShim::Keys(typed.to_vec())).is_err()
        {
            // The shim is gone: the agent's outcome says why.
            return Ok(Some(Ended::Closed));
        }
        Ok(stop.map(|_| Ended::Detached))
    }

    fn follow_size(&mut self) -> Result<()> {
        let Some(resizes) = &mut self.resizes else {
            return Ok(());
        };
        // Several changes may have come at once: the size now is all that counts.
        while resizes.take().is_some() {}
        match this_terminal_size() {
            Some(size) => self.send(&ToShim::Resize(size)),
            None => Ok(()),
        }
    }

    /// Gives the shim a terminal of its own to draw on and read keys from.
    fn hand_over(&mut self, terminal: std::fs::File) -> Result<()> {
        let mut bytes = Vec::new();
        ToShim::WatchTerminal {
            read_only: self.read_only,
            detach: self.detach,
        }
        .encode(&mut bytes);
        let sent = grove_sys::fdpass::send_with_fd(&self.console, &bytes, &terminal)
            .context("handing the terminal to the agent's console")?;
        self.console
            .write_all(&bytes[sent..])
            .context("the agent's terminal closed")
    }

    fn send(&mut self, message: &ToShim) -> Result<()> {
        let mut bytes = Vec::new();
        message.encode(&mut bytes);
        self.console
            .write_all(&bytes)
            .context("the agent's terminal closed")
    }
}

/// This terminal opened anew (a file description of the shim's own, so that making it
/// non-blocking there leaves this shell's alone), when keys and output are one terminal.
fn own_terminal() -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let input = nix::unistd::ttyname(std::io::stdin()).ok()?;
    let output = nix::unistd::ttyname(std::io::stdout()).ok()?;
    if input != output {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        // Opening it must not make it anyone's controlling terminal.
        .custom_flags(nix::fcntl::OFlag::O_NOCTTY.bits())
        .open(input)
        .ok()
}

fn this_terminal_size() -> Option<TtySize> {
    grove_sys::term::size(std::io::stdout())
        .or_else(|| grove_sys::term::size(std::io::stdin()))
        .map(|(rows, cols)| TtySize { rows, cols })
}

/// `ctrl-]`, `ctrl-a` ... `ctrl-z`, `ctrl-\`, `ctrl-^`, `ctrl-_`, `ctrl-@`.
fn parse_detach_key(key: &str) -> Result<u8> {
    let lower = key.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("ctrl-")
        .or_else(|| lower.strip_prefix("c-"))
        .or_else(|| lower.strip_prefix('^'));
    match rest.map(str::as_bytes) {
        Some([c @ b'a'..=b'z']) => Ok(c - b'a' + 1),
        Some([c @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')]) => Ok(c & 0x1f),
        _ => Err(UsageError(format!(
            "detach key `{key}` is not one grove knows: give ctrl- and a letter or one of @ [ \\ ] ^ _ (e.g. ctrl-])"
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_detach_key;

    #[test]
    fn detach_keys_are_control_characters() {
        assert_eq!(parse_detach_key("ctrl-]").ok(), Some(0x1d));
        assert_eq!(parse_detach_key("Ctrl-A").ok(), Some(0x01));
        assert_eq!(parse_detach_key("^q").ok(), Some(0x11));
        assert!(parse_detach_key("q").is_err());
        assert!(parse_detach_key("ctrl-1").is_err());
    }
}

//! Terminals, through nix and rustix (portable across Unix): the width of ours, the
//! pseudo terminals agents get, and raw mode for `grove attach`.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// Columns of the terminal on stdout; `None` when stdout is not a terminal.
pub fn stdout_width() -> Option<u16> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (size.ws_col > 0).then_some(size.ws_col)
}

/// Rows and columns of the terminal `fd`; `None` when it is not one (or says 0x0).
pub fn size(fd: impl AsFd) -> Option<(u16, u16)> {
    let size = rustix::termios::tcgetwinsize(fd).ok()?;
    (size.ws_row > 0 && size.ws_col > 0).then_some((size.ws_row, size.ws_col))
}

/// Sets the size of the terminal `fd`; the kernel sends SIGWINCH to its foreground.
pub fn set_size(fd: impl AsFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = rustix::termios::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(fd, size).map_err(io::Error::from)
}

/// A new pseudo terminal of the given size: the master side and the agent's side.
pub struct Pty {
    pub master: OwnedFd,
    pub agent: OwnedFd,
}

pub fn open_pty(rows: u16, cols: u16) -> io::Result<Pty> {
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).map_err(io::Error::from)?;
    for fd in [&pty.master, &pty.slave] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok(Pty {
        master: pty.master,
        agent: pty.slave,
    })
}

/// In a child between fork and exec, with the terminal already on its stdin: a new
/// session whose controlling terminal is that one. Async-signal-safe.
pub fn take_as_controlling_terminal() -> io::Result<()> {
    rustix::process::setsid()?;
    rustix::process::ioctl_tiocsctty(std::io::stdin())?;
    Ok(())
}

/// The process group in the foreground of the terminal the master `fd` drives.
pub fn foreground_group(master: impl AsFd) -> Option<u32> {
    let pid = rustix::termios::tcgetpgrp(master).ok()?;
    Some(pid.as_raw_nonzero().get() as u32)
}

/// The device number of the terminal whose master is `fd` (what the agent's side
/// shows as `st_rdev`).
pub fn agent_side_device(agent_side: impl AsFd) -> io::Result<u64> {
    Ok(rustix::fs::fstat(agent_side)?.st_rdev as u64)
}

/// Raw mode on the terminal `fd` until the guard drops (then the old mode is back).
pub struct RawMode {
    fd: OwnedFd,
    saved: rustix::termios::Termios,
}

impl RawMode {
    pub fn enter(fd: impl AsFd) -> io::Result<RawMode> {
        let fd = fd.as_fd().try_clone_to_owned()?;
        let saved = rustix::termios::tcgetattr(&fd)?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&fd, rustix::termios::OptionalActions::Now, &raw)?;
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            &self.fd,
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

/// Makes `group` the foreground process group of the terminal on stdin (so that Ctrl-C
/// reaches it and not us), then wakes it: it may have stopped reading the terminal
/// before it was in the foreground.
pub fn give_foreground(group: u32) -> io::Result<()> {
    let pid = rustix::process::Pid::from_raw(group as i32)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "process group 0"))?;
    rustix::termios::tcsetpgrp(std::io::stdin(), pid)?;
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::CONT);
    Ok(())
}

/// Makes our own process group the foreground of the terminal on stdin again. We are
/// in the background until then, so SIGTTOU (which would stop us) is held meanwhile.
pub fn take_foreground() -> io::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let stop = SigSet::from(Signal::SIGTTOU);
    stop.thread_block().map_err(io::Error::from)?;
    let taken = rustix::termios::tcsetpgrp(std::io::stdin(), rustix::process::getpgrp());
    stop.thread_unblock().map_err(io::Error::from)?;
    Ok(taken?)
}

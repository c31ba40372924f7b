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
use crate::exit::{UsageError, AGENT_FAILED};
use crate::output::result_line;
use anyhow::{anyhow, bail, Context, Result};
use grove_proto::console::{FromShim, ToShim};
use grove_proto::methods::{Attach, AttachParams, Wait, WaitParams};
use grove_proto::types::TtySize;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// On the way in, this terminal's own screen is kept (the alternate screen) and
/// cleared; on the way out the modes an agent may have switched on are switched off.
const ENTER_SCREEN: &[u8] = b"\x1b[?1049h\x1b[H\x1b[2J";
const LEAVE_SCREEN: &[u8] =
    b"\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1l\x1b>\x1b[?25h\x1b[0m\x1b[?1049l";

pub fn run(id: &str, read_only: bool, detach_key: &str) -> Result<ExitCode> {
    let detach = parse_detach_key(detach_key)?;
    let interactive = std::io::stdin().is_terminal();
    // Blocked before any thread starts, so that only the resize thread takes it.
    let winch = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGWINCH);
    winch.thread_block().context("blocking SIGWINCH")?;
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
    // The daemon's end was non-blocking (tokio); ours blocks, read by one thread.
    console.set_nonblocking(false)?;
    let writer = Arc::new(Mutex::new(console.try_clone()?));
    if let (Some(size), false) = (this_terminal_size(), read_only) {
        frame(&writer, &ToShim::Resize(size))?;
    }
    frame(&writer, &ToShim::Watch)?;
    let detached = Arc::new(AtomicBool::new(false));
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
    spawn_input(
        writer.clone(),
        detached.clone(),
        detach,
        read_only,
        interactive,
    );
    if !read_only {
        spawn_resizer(writer.clone(), winch);
    }
    let relayed = relay(console, &mut out);
    out.write_all(LEAVE_SCREEN)?;
    out.flush()?;
    drop(out);
    drop(raw);
    if detached.load(Ordering::SeqCst) {
        eprintln!("grove: detached from {agent}; it keeps running (`grove attach {agent}` again)");
        return Ok(ExitCode::SUCCESS);
    }
    relayed?;
    outcome(&dirs, &agent)
}

/// The terminal closed: the agent ended (or its shim died). Its outcome comes from the
/// daemon, on a new connection (the daemon may have restarted while we were attached).
fn outcome(dirs: &grove_proto::paths::Dirs, agent: &str) -> Result<ExitCode> {
    let finished = connect(dirs)?
        .call::<Wait>(&WaitParams {
            ids: vec![agent.to_string()],
            mode: Default::default(),
            until: Default::default(),
        })?
        .agents;
    let record = finished
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("the daemon returned no result for agent {agent}"))?;
    eprintln!("{}", result_line(&record));
    Ok(if record.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

/// The agent's screen, then its output, to this terminal until the console closes.
fn relay(mut console: UnixStream, out: &mut impl Write) -> Result<()> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        while let Some(message) = FromShim::decode(&mut buf)? {
            match message {
                FromShim::Snapshot { data, .. } | FromShim::Output(data) => {
                    out.write_all(&data)?;
                    out.flush()?;
                }
                FromShim::Refused(why) => bail!("{why}"),
                _ => {}
            }
        }
        match console.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Shut down by the detach key, or the shim is gone.
            Err(_) => return Ok(()),
        }
    }
}

fn spawn_input(
    writer: Arc<Mutex<UnixStream>>,
    detached: Arc<AtomicBool>,
    detach: u8,
    read_only: bool,
    interactive: bool,
) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let keys = &buf[..n];
            // Ctrl-C leaves a read-only view too: nothing would reach the agent anyway.
            let stop = keys
                .iter()
                .position(|&k| k == detach || (read_only && interactive && k == 0x03));
            let typed = &keys[..stop.unwrap_or(keys.len())];
            if !read_only
                && !typed.is_empty()
                && frame(&writer, &ToShim::Keys(typed.to_vec())).is_err()
            {
                return;
            }
            if stop.is_some() {
                detached.store(true, Ordering::SeqCst);
                if let Ok(stream) = writer.lock() {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
        }
    });
}

fn spawn_resizer(writer: Arc<Mutex<UnixStream>>, winch: nix::sys::signal::SigSet) {
    std::thread::spawn(move || {
        while winch.wait().is_ok() {
            if let Some(size) = this_terminal_size() {
                if frame(&writer, &ToShim::Resize(size)).is_err() {
                    return;
                }
            }
        }
    });
}

fn frame(writer: &Mutex<UnixStream>, message: &ToShim) -> Result<()> {
    let mut bytes = Vec::new();
    message.encode(&mut bytes);
    let mut stream = writer.lock().map_err(|_| anyhow!("writer poisoned"))?;
    stream.write_all(&bytes)?;
    Ok(())
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

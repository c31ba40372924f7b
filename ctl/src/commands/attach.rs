//! `grove attach`: this terminal becomes a view of the agent's. Keys go to the agent
//! (in raw mode, so Ctrl-C and arrows reach it), its output comes back, the window
//! size follows this terminal. The detach key leaves the agent running; when the agent
//! ends, its outcome is printed and the exit code is `grove wait`'s.

use crate::connect::{connect, dirs};
use crate::exit::{UsageError, AGENT_FAILED};
use crate::output::result_line;
use anyhow::{anyhow, bail, Context, Result};
use grove_proto::methods::{attach, Attach, AttachParams};
use grove_proto::types::TtySize;
use grove_proto::Notification;
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
    let mut client = connect(&dirs()?)?;
    let attached = client.call::<Attach>(&AttachParams {
        id: id.into(),
        read_only,
        size: this_terminal_size(),
    })?;
    let agent = attached.id.clone();
    let screen =
        attach::decode(&attached.screen).map_err(|e| anyhow!("the daemon sent a screen {e}"))?;
    let writer = Arc::new(Mutex::new(client.writer()?));
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
    out.write_all(&screen)?;
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
    let end = relay(&mut client, &mut out);
    out.write_all(LEAVE_SCREEN)?;
    out.flush()?;
    drop(out);
    drop(raw);
    if detached.load(Ordering::SeqCst) {
        eprintln!("grove: detached from {agent}; it keeps running (`grove attach {agent}` again)");
        return Ok(ExitCode::SUCCESS);
    }
    match end? {
        attach::End {
            record: Some(record),
            ..
        } => {
            eprintln!("{}", result_line(&record));
            Ok(if record.succeeded() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(AGENT_FAILED)
            })
        }
        attach::End { reason, .. } => {
            bail!(
                "{}",
                reason.unwrap_or_else(|| format!("the terminal of agent {agent} closed"))
            )
        }
    }
}

/// Output to this terminal until the end (or until the connection closes: detach).
fn relay(client: &mut grove_proto::Client, out: &mut impl Write) -> Result<attach::End> {
    loop {
        let Notification { method, params, .. } = match client.next_notification() {
            Ok(n) => n,
            Err(e) => {
                return Ok(attach::End {
                    record: None,
                    reason: Some(format!(
                        "the daemon closed the connection ({e}); the agent keeps running"
                    )),
                })
            }
        };
        match method.as_str() {
            attach::OUTPUT => {
                let data: attach::Data = serde_json::from_value(params)?;
                out.write_all(&attach::decode(&data.data).map_err(|e| anyhow!("output {e}"))?)?;
                out.flush()?;
            }
            attach::END => return Ok(serde_json::from_value(params)?),
            _ => {}
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
            if !read_only && !typed.is_empty() {
                let data = attach::Data {
                    data: attach::encode(typed),
                };
                if notify(&writer, attach::INPUT, &data).is_err() {
                    return;
                }
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
                if notify(&writer, attach::RESIZE, &size).is_err() {
                    return;
                }
            }
        }
    });
}

fn notify(writer: &Mutex<UnixStream>, method: &str, params: &impl serde::Serialize) -> Result<()> {
    let line = grove_proto::framing::encode_line(&Notification {
        jsonrpc: "2.0".into(),
        method: method.into(),
        params: serde_json::to_value(params)?,
    });
    let mut stream = writer.lock().map_err(|_| anyhow!("writer poisoned"))?;
    stream.write_all(&line)?;
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

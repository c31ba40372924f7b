//! `grove logs`: the agent's output file, read directly (same user, same machine).
//! `-f` follows with inotify and ends when the exit record appears (no polling), with
//! the outcome line and the agent's status as exit code.
//! The output is the agent's, so on a terminal its control characters are escaped
//! (an escape sequence could retitle the window or rewrite what is on screen);
//! newlines and tabs pass. `--raw`, or a pipe, gets the bytes as they are.

use crate::connect::{connect, dirs};
use anyhow::{Context, Result};
use grove_agent_shim::EXIT_RECORD_FILE;
use grove_proto::agent_log::{marker, LogView};
use grove_proto::methods::{Get, IdParams};
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

pub fn run(id: &str, follow: bool, raw: bool, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    let log = &record.log_path;
    if json {
        let text = LogView::open(log)
            .and_then(|mut view| view.read_all())
            .unwrap_or_default();
        crate::output::print_json(&serde_json::json!({
            "id": record.id,
            "path": log,
            "text": String::from_utf8_lossy(&text),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let agent_dir = log.parent().context("log path has no directory")?;
    let raw = raw || !io::stdout().is_terminal();
    if !follow {
        copy_new(log, &mut Position::default(), raw, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if record.status.is_final() {
        copy_new(log, &mut Position::default(), raw, true)?;
    } else {
        follow_until_exit(log, agent_dir, raw)?;
    }
    super::wait::outcome(&dirs()?, &record.id)
}

fn follow_until_exit(log: &Path, agent_dir: &Path, raw: bool) -> Result<()> {
    // Watch before looking, so that nothing written in between is missed.
    let watch = grove_sys::watch::DirWatch::new(agent_dir)
        .with_context(|| format!("watching {}", agent_dir.display()))?;
    let exit_record = agent_dir.join(EXIT_RECORD_FILE);
    let mut at = Position::default();
    loop {
        let finished = exit_record.exists();
        copy_new(log, &mut at, raw, finished)?;
        if finished {
            return Ok(());
        }
        watch.wait().context("waiting for output")?;
    }
}

/// Prints what the log holds beyond logical `offset` (`grove_proto::agent_log`: its
/// halves read as one) and advances it; output dropped meanwhile is told by the
/// marker.
/// How far a reader of the log got.
#[derive(Default)]
struct Position {
    /// The logical offset (`grove_proto::agent_log`) of the next byte to print.
    offset: u64,
    /// What was printed last ended a line (or nothing was printed).
    mid_line: bool,
}

fn copy_new(log: &Path, at: &mut Position, raw: bool, last: bool) -> Result<()> {
    let offset = &mut at.offset;
    const CHUNK: u64 = 1 << 20;
    let mut view = LogView::open(log).with_context(|| format!("reading {}", log.display()))?;
    let end = view.end();
    let mut stdout = io::stdout().lock();
    while *offset < end {
        let (from, bytes) = view
            .read(*offset, CHUNK)
            .with_context(|| format!("reading {}", log.display()))?;
        if bytes.is_empty() {
            break;
        }
        if from > *offset {
            // A line of its own, even after a line cut short by what was dropped.
            if at.mid_line {
                stdout.write_all(b"\n")?;
            }
            stdout.write_all(marker(from).as_bytes())?;
        }
        at.mid_line = bytes.last() != Some(&b'\n');
        let at_end = from + bytes.len() as u64 >= end;
        if raw {
            stdout.write_all(&bytes)?;
            *offset = from + bytes.len() as u64;
        } else {
            // A character cut at a chunk's end is read whole with the next chunk; at
            // the log's end it waits for the rest unless this is the last look.
            let (shown, used) = escaped(&bytes, last && at_end);
            stdout.write_all(&shown)?;
            *offset = from + used as u64;
        }
        if at_end {
            break;
        }
    }
    stdout.flush()?;
    Ok(())
}

/// `bytes` with control characters made visible as [`crate::output::safe`] does, and
/// how many of them it covers: a character cut off at the end waits for the rest
/// unless `last`.
fn escaped(bytes: &[u8], last: bool) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                push_escaped(&mut out, text);
                return (out, bytes.len());
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // Checked by from_utf8 just now.
                push_escaped(&mut out, std::str::from_utf8(good).unwrap_or_default());
                match e.error_len().or(last.then_some(bad.len())) {
                    Some(n) => {
                        for b in &bad[..n] {
                            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                        }
                        rest = &bad[n..];
                    }
                    None => return (out, bytes.len() - bad.len()),
                }
            }
        }
    }
}

fn push_escaped(out: &mut Vec<u8>, text: &str) {
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let body = body.strip_suffix('\r').unwrap_or(body);
        out.extend_from_slice(crate::output::safe(body).as_bytes());
        out.extend_from_slice(end.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_escaped_and_cut_characters_wait() {
        let input = b"ok\r\n\x1b[2Kgone\rback\tt\xff\n\xc3";
        let (out, used) = escaped(input, false);
        assert_eq!(
            String::from_utf8(out).ok().as_deref(),
            Some("ok\n\\e[2Kgone\\rback t\\xff\n")
        );
        assert_eq!(used, input.len() - 1, "the lone first byte of \u{e9} waits");
        let (out, used) = escaped(input, true);
        assert!(out.ends_with(b"\n\\xc3"));
        assert_eq!(used, input.len());
    }
}

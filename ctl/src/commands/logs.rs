//! `grove logs`: the agent's output file, read directly (same user, same machine).
//! `-f` follows with inotify and ends when the exit record appears: no polling.

use crate::connect::{connect, dirs};
use anyhow::{Context, Result};
use grove_agent_shim::EXIT_RECORD_FILE;
use grove_proto::methods::{Get, IdParams};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

pub fn run(id: &str, follow: bool, json: bool) -> Result<ExitCode> {
    let record = connect(&dirs()?)?.call::<Get>(&IdParams { id: id.into() })?;
    let log = &record.log_path;
    if json {
        let text = std::fs::read(log).unwrap_or_default();
        crate::output::print_json(&serde_json::json!({
            "id": record.id,
            "path": log,
            "text": String::from_utf8_lossy(&text),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let agent_dir = log.parent().context("log path has no directory")?;
    if !follow || record.status.is_final() {
        copy_new(log, &mut 0)?;
        return Ok(ExitCode::SUCCESS);
    }
    follow_until_exit(log, agent_dir)?;
    Ok(ExitCode::SUCCESS)
}

fn follow_until_exit(log: &Path, agent_dir: &Path) -> Result<()> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).context("inotify")?;
    // Watch before looking, so that nothing written in between is missed.
    inotify
        .add_watch(
            agent_dir,
            AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CREATE,
        )
        .with_context(|| format!("watching {}", agent_dir.display()))?;
    let exit_record = agent_dir.join(EXIT_RECORD_FILE);
    let mut offset = 0;
    loop {
        let finished = exit_record.exists();
        copy_new(log, &mut offset)?;
        if finished {
            return Ok(());
        }
        inotify.read_events().context("waiting for output")?;
    }
}

/// Prints what the log holds beyond `offset` and advances it.
fn copy_new(log: &Path, offset: &mut u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = match File::open(log) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", log.display())),
    };
    file.seek(SeekFrom::Start(*offset))?;
    let mut stdout = io::stdout().lock();
    *offset += io::copy(&mut file, &mut stdout)?;
    stdout.flush()?;
    Ok(())
}

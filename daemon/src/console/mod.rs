//! The daemon's side of the agents' consoles: the terminal (or kept-open stdin) each
//! shim holds (agent-shim/src/console). `grove attach`, `send` and `screen` reach it
//! through here, and a monitor per agent turns what the shim sees into the agent's
//! activity (waiting or working).

pub mod monitor;

use crate::Error;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::paths::Dirs;
use grove_proto::types::AgentRecord;
use std::io;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

pub fn socket_path(dirs: &Dirs, id: &str) -> PathBuf {
    dirs.agent_dir(id).join(grove_proto::console::SOCKET_FILE)
}

/// Why a console cannot be reached for this agent, if it cannot.
pub fn check_reachable(record: &AgentRecord, want_terminal: bool) -> Result<(), Error> {
    if want_terminal && record.tty.is_none() {
        return Err(Error::InvalidState(format!(
            "agent {} has no terminal: it was spawned without --tty (spawn it with \
             `grove spawn --tty`; `grove logs {}` shows its output)",
            record.id, record.id
        )));
    }
    if !record.status.is_running() {
        return Err(Error::InvalidState(format!(
            "agent {} is {}, not running: its console is gone",
            record.id,
            record.status_text()
        )));
    }
    if record.tty.is_none() && !record.keep_stdin {
        return Err(Error::InvalidState(format!(
            "agent {} has neither a terminal nor an open stdin: spawn it with --tty or --stdin \
             to send it input",
            record.id
        )));
    }
    Ok(())
}

/// The reading half of a connection to a shim's console.
pub struct Incoming {
    read: OwnedReadHalf,
    buf: Vec<u8>,
}

impl Incoming {
    /// The next message; `None` once the shim closed the connection (it ended).
    pub async fn next(&mut self) -> io::Result<Option<FromShim>> {
        loop {
            if let Some(message) = FromShim::decode(&mut self.buf).map_err(io::Error::other)? {
                return Ok(Some(message));
            }
            // Read into the buffer's spare room, not a chunk on the stack: a local held
            // across this await would sit in every request's future (this one is part
            // of the dispatch's), which tokio copies into each task it spawns.
            self.buf.reserve(64 << 10);
            if self.read.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }
}

/// The writing half.
pub struct Outgoing {
    write: OwnedWriteHalf,
}

impl Outgoing {
    pub async fn send(&mut self, message: &ToShim) -> io::Result<()> {
        let mut frame = Vec::new();
        message.encode(&mut frame);
        self.write.write_all(&frame).await
    }
}

/// The shim binds its socket just after it starts, and the daemon counts the agent as
/// running from the shim's start: a first connection may come before the socket is
/// there. A console that does not appear within this time is not coming.
const APPEARS_WITHIN: Duration = Duration::from_secs(10);

/// Connects to the agent's console, waiting (bounded) for a shim that is just starting.
pub async fn connect(dirs: &Dirs, id: &str) -> io::Result<(Incoming, Outgoing)> {
    let (read, write) = connect_stream(dirs, id).await?.into_split();
    Ok((
        Incoming {
            read,
            buf: Vec::new(),
        },
        Outgoing { write },
    ))
}

/// The same, as one stream (to hand to a client).
pub async fn connect_stream(dirs: &Dirs, id: &str) -> io::Result<UnixStream> {
    let deadline = tokio::time::Instant::now() + APPEARS_WITHIN;
    let mut pause = Duration::from_millis(2);
    loop {
        match connect_now(dirs, id).await {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            result => return result,
        }
    }
}

async fn connect_now(dirs: &Dirs, id: &str) -> io::Result<UnixStream> {
    UnixStream::connect(socket_path(dirs, id)).await
}

/// One request, one answer, on a connection of its own.
pub async fn ask(dirs: &Dirs, record: &AgentRecord, request: ToShim) -> Result<FromShim, Error> {
    let unreachable = |e: io::Error| {
        Error::InvalidState(format!(
            "cannot reach the console of agent {}: {e} (did it just end? `grove show {}`)",
            record.id, record.id
        ))
    };
    let (mut incoming, mut outgoing) = connect(dirs, &record.id).await.map_err(unreachable)?;
    outgoing.send(&request).await.map_err(unreachable)?;
    match incoming.next().await.map_err(unreachable)? {
        Some(FromShim::Refused(why)) => {
            Err(Error::InvalidState(format!("agent {}: {why}", record.id)))
        }
        Some(answer) => Ok(answer),
        None => Err(Error::InvalidState(format!(
            "agent {} ended before its console answered",
            record.id
        ))),
    }
}

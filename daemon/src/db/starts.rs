//! Every start of a daemon on this database, and whether the one before it stopped
//! cleanly: the daemon-restart counters survive the restarts they count.

use rusqlite::{params, Connection, OptionalExtension};

/// How the daemon before this one ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// There was none: the database is new.
    First,
    Stopped,
    /// It never recorded its stop (killed, crashed, the machine went down).
    Crashed,
}

impl Previous {
    pub fn as_str(self) -> &'static str {
        match self {
            Previous::First => "first",
            Previous::Stopped => "stopped",
            Previous::Crashed => "crashed",
        }
    }
}

/// This start, recorded, and the restarts so far (this one included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Starts {
    /// This start's row, marked at a clean stop.
    pub seq: i64,
    pub after_stop: u64,
    pub after_crash: u64,
}

pub fn record(conn: &mut Connection, now_ms: u64, pid: u32) -> rusqlite::Result<Starts> {
    let tx = conn.transaction()?;
    let last: Option<Option<i64>> = tx
        .query_row(
            "SELECT stopped_at_ms FROM daemon_starts ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let previous = match last {
        None => Previous::First,
        Some(Some(_)) => Previous::Stopped,
        Some(None) => Previous::Crashed,
    };
    tx.execute(
        "INSERT INTO daemon_starts (started_at_ms, pid, previous) VALUES (?1, ?2, ?3)",
        params![now_ms as i64, pid, previous.as_str()],
    )?;
    let seq = tx.last_insert_rowid();
    let count = |what: Previous| -> rusqlite::Result<u64> {
        tx.query_row(
            "SELECT COUNT(*) FROM daemon_starts WHERE previous = ?1",
            [what.as_str()],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as u64)
    };
    let starts = Starts {
        seq,
        after_stop: count(Previous::Stopped)?,
        after_crash: count(Previous::Crashed)?,
    };
    tx.commit()?;
    Ok(starts)
}

/// A clean stop: the next start counts as a restart after a stop, not a crash.
pub fn stopped(conn: &Connection, seq: i64, now_ms: u64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE daemon_starts SET stopped_at_ms = ?1 WHERE seq = ?2",
        params![now_ms as i64, seq],
    )?;
    Ok(())
}

//! The daemon's own high-water mark of its log: how many committed frames it has seen
//! in the log of which salts. A log that later holds fewer frames under the same salts
//! went backwards, whatever its own bytes say: cut at a frame boundary, or its last
//! frames overwritten, which no reading of the log alone can tell from a crash.
//!
//! The mark is taken from the log's own intact frames on the database thread (so no
//! write is in flight), every few seconds while the log changes: it never claims more
//! than the log held. It is not flushed to disk: a mark a power cut loses or leaves
//! behind only makes the check weaker, never wrong. Within one set of salts SQLite only
//! appends committed frames; a checkpoint that starts the log again changes the salts,
//! and then the mark says nothing.

use super::health::{self, sibling};
use super::wal::Scan;
use super::Db;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How often the log is looked at. A full read of a log at its autocheckpoint size (4
/// MiB) takes a few milliseconds of the database thread; only a changed log is read.
const EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub salts: (u32, u32),
    pub committed: u64,
    pub at_ms: u64,
}

pub fn path(db: &Path) -> PathBuf {
    sibling(db, "-mark")
}

/// The mark last taken, if there is a readable one.
pub fn read(db: &Path) -> Option<Mark> {
    let text = std::fs::read_to_string(path(db)).ok()?;
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    let mut next = || words.next().flatten();
    let (salt1, salt2, committed, at_ms) = (next()?, next()?, next()?, next()?);
    Some(Mark {
        salts: (u32::try_from(salt1).ok()?, u32::try_from(salt2).ok()?),
        committed,
        at_ms,
    })
}

/// Records what a sound scan found, replacing the mark in one rename.
fn write(db: &Path, scan: &Scan, at_ms: u64) -> std::io::Result<()> {
    let Some((salt1, salt2)) = scan.salts else {
        return Ok(());
    };
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fresh = sibling(db, "-mark.new");
    // Private like every file of the state directory.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&fresh)?
        .write_all(format!("{salt1} {salt2} {} {at_ms}\n", scan.committed).as_bytes())?;
    std::fs::rename(&fresh, path(db))
}

/// Forgets the mark: the log it describes is gone (`grove daemon recover`).
pub fn remove(db: &Path) {
    let _ = std::fs::remove_file(path(db));
}

/// Size and modification time of the log: unchanged, it is not read again.
type Stamp = Option<(u64, Option<SystemTime>)>;

fn stamp(db: &Path) -> Stamp {
    let meta = std::fs::metadata(health::wal_path(db)).ok()?;
    Some((meta.len(), meta.modified().ok()))
}

/// Marks the log every [`EVERY`] until the daemon stops.
pub fn start(db: Db, path: PathBuf, mut stopped: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut seen: Stamp = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(EVERY) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            let path = path.clone();
            match db.call(move |_| Ok(look(&path, seen))).await {
                Ok(now) => seen = now,
                Err(_) => return,
            }
        }
    });
}

/// On the database thread: reads a log that changed since `seen`, and marks it if it is
/// sound. Damage found here happened under the running daemon, which goes on serving
/// from what it has read: said loudly, and the mark kept as it was, so that the next
/// start says it too.
fn look(db: &Path, seen: Stamp) -> Stamp {
    let now = stamp(db);
    if now.is_none() || now == seen {
        return now;
    }
    let check = match health::check_log(db) {
        Ok(check) => check,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the database's log to mark it");
            return now;
        }
    };
    match check.report() {
        Some(report) => tracing::error!(
            "{report} This happened while the daemon runs; stop it (`grove daemon stop`) \
             and {}",
            health::RECOVER_ADVICE
        ),
        None => {
            if let Err(e) = write(db, &check.scan, grove_agent_shim::now_ms()) {
                tracing::warn!(error = %e, "cannot mark the database's log");
            }
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_nonsense_is_no_mark() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("g.db");
        let scan = Scan {
            salts: Some((7, u32::MAX)),
            committed: 42,
            ..Scan::default()
        };
        write(&db, &scan, 1234).expect("write");
        assert_eq!(
            read(&db),
            Some(Mark {
                salts: (7, u32::MAX),
                committed: 42,
                at_ms: 1234
            })
        );
        for nonsense in ["", "1 2 3", "a b c d", "99999999999 1 1 1"] {
            std::fs::write(path(&db), nonsense).expect("write");
            assert_eq!(read(&db), None, "{nonsense:?}");
        }
    }
}

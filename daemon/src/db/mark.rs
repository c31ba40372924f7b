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
//!
//! The mark also holds the size of a log the daemon's own failed write left ending
//! inside a frame: SQLite keeps what it could write of a frame when the disk fills up
//! (on a tmpfs, 2072 of a frame's 4120 bytes), and until the next commit writes over it
//! that reads as a cut log. Noted right after the failure, on the database thread, a
//! kill meanwhile is not called damage at the next start.

use super::health::{self, sibling};
use super::wal::{Damage, Scan};
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
    /// The log's size when it ended inside a frame the daemon itself failed to write
    /// (the disk refused the rest): that cut is its own, not damage.
    pub torn_at: Option<u64>,
}

pub fn path(db: &Path) -> PathBuf {
    sibling(db, "-mark")
}

/// Bytes of the mark file. It is written in place, never replaced: a disk that filled
/// up would refuse a new file just when a failed write needs noting, but lets the
/// blocks a file already has be written again.
const RECORD: usize = 256;

/// The mark last taken, if there is a readable one. The record is written twice on its
/// line: a read torn by a write in flight has two different halves and is no mark.
pub fn read(db: &Path) -> Option<Mark> {
    let text = std::fs::read_to_string(path(db)).ok()?;
    let (first, second) = text.trim_end().split_once(" | ")?;
    if first != second {
        return None;
    }
    let mut words = first.split(' ').map(|w| w.parse::<u64>().ok());
    let mut next = || words.next().flatten();
    let (salt1, salt2, committed, at_ms) = (next()?, next()?, next()?, next()?);
    Some(Mark {
        salts: (u32::try_from(salt1).ok()?, u32::try_from(salt2).ok()?),
        committed,
        at_ms,
        torn_at: next(),
    })
}

/// Records what a sound scan found.
fn write(db: &Path, scan: &Scan, at_ms: u64, torn_at: Option<u64>) -> std::io::Result<()> {
    let Some((salt1, salt2)) = scan.salts else {
        return Ok(());
    };
    let mut fields = format!("{salt1} {salt2} {} {at_ms}", scan.committed);
    if let Some(bytes) = torn_at {
        fields.push_str(&format!(" {bytes}"));
    }
    write_record(db, &fields)
}

/// Writes `fields` (twice) over the whole record, padded to its fixed size.
fn write_record(db: &Path, fields: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // Five numbers twice take at most 171 bytes; a record cut to fit would read as none.
    let record = format!("{fields} | {fields}");
    let mut bytes = format!("{record:<width$}\n", width = RECORD - 1).into_bytes();
    bytes.truncate(RECORD);
    // Private like every file of the state directory.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path(db))?
        .write_all_at(&bytes, 0)
}

/// Makes the mark file hold its record's bytes before any write can fail for space:
/// a record saying there is no mark yet, unless a readable one is there.
fn prepare(db: &Path) -> std::io::Result<()> {
    let fits = std::fs::metadata(path(db)).is_ok_and(|m| m.len() == RECORD as u64);
    if fits && read(db).is_some() {
        return Ok(());
    }
    write_record(db, "none")
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

/// Damage the mark found under the running daemon: the report, once.
pub type FoundDamage = std::sync::Arc<std::sync::OnceLock<String>>;

/// Marks the log every [`EVERY`] until the daemon stops. Damage found meanwhile goes
/// into `found` and stops the daemon (`stop`): it never goes on serving from a store
/// that lost acknowledged writes, and its next start refuses the same damage.
pub fn start(
    db: Db,
    path: PathBuf,
    mut stopped: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    found: FoundDamage,
) {
    tokio::spawn(async move {
        let ready = path.clone();
        let prepared = db.call(move |_| Ok(prepare(&ready))).await;
        if let Ok(Err(e)) = prepared {
            tracing::warn!(error = %e, "cannot make the mark of the database's log");
        }
        let mut seen: Stamp = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(EVERY) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            let path = path.clone();
            match db.call(move |conn| Ok(look(conn, &path, seen))).await {
                Ok(Ok(now)) => seen = now,
                Ok(Err(report)) => {
                    tracing::error!(
                        "{report} This happened while the daemon ran; it stops now so as \
                         not to serve from it; {}",
                        health::RECOVER_ADVICE
                    );
                    let _ = found.set(report);
                    let _ = stop.send(true);
                    return;
                }
                Err(_) => return,
            }
        }
    });
}

/// On the database thread: reads a log that changed since `seen`, and marks it if it is
/// sound. Damage found here happened under the running daemon: its report, and the
/// mark kept as it was, so that the next start says it too.
fn look(conn: &rusqlite::Connection, db: &Path, seen: Stamp) -> Result<Stamp, String> {
    let now = stamp(db);
    if now.is_none() || now == seen {
        return Ok(now);
    }
    let check = match health::check_log(db) {
        Ok(check) => check,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the database's log to mark it");
            return Ok(now);
        }
    };
    if let Some(report) = check.report() {
        leave_as_found(conn);
        return Err(report);
    }
    let torn_at = check.own_cut().then_some(check.scan.bytes);
    mark(db, &check, torn_at);
    Ok(now)
}

/// A damaged log stays as it was found for `grove daemon recover`: the connection writes
/// nothing more, and its close does not checkpoint the log into the file (that copied
/// the damaged frames into the database and deleted the log, so that the next start
/// found nothing to refuse).
fn leave_as_found(conn: &rusqlite::Connection) {
    use rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE;
    if let Err(e) = conn.set_db_config(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true) {
        tracing::warn!(error = %e, "cannot keep the damaged log from being checkpointed at close");
    }
    if let Err(e) = conn.pragma_update(None, "query_only", true) {
        tracing::warn!(error = %e, "cannot stop writes to the damaged database");
    }
}

fn mark(db: &Path, check: &health::LogCheck, torn_at: Option<u64>) {
    if let Err(e) = write(db, &check.scan, grove_proto::now_ms(), torn_at) {
        tracing::warn!(error = %e, "cannot mark the database's log");
    }
}

fn damaged_under_the_daemon(report: &str) {
    tracing::error!(
        "{report} This happened while the daemon runs; stop it (`grove daemon stop`) and {}",
        health::RECOVER_ADVICE
    );
}

/// On the database thread, right after SQLite failed a write (the disk full, an I/O
/// error): what it could write of a frame stays in the log, which then ends inside a
/// frame like a cut one until the next commit writes over it. Marked as the daemon's
/// own, so that a kill before then is not called damage at the next start.
pub fn note_failed_write(conn: &rusqlite::Connection, error: &rusqlite::Error) {
    use rusqlite::ErrorCode::{DiskFull, SystemIoFailure};
    let failed_write = matches!(error.sqlite_error_code(), Some(DiskFull | SystemIoFailure));
    let Some(db) = conn.path().filter(|_| failed_write).map(Path::new) else {
        return;
    };
    let check = match health::check_log(db) {
        Ok(check) => check,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the database's log after a failed write");
            return;
        }
    };
    let cut = matches!(check.scan.damage, Some(Damage::Cut { .. }));
    match check.report() {
        Some(_) if cut && check.behind().is_none() => {
            tracing::info!(
                bytes = check.scan.bytes,
                "a failed write left the log ending inside a frame; the next commit writes over it"
            );
            mark(db, &check, Some(check.scan.bytes));
        }
        Some(report) => damaged_under_the_daemon(&report),
        None => mark(db, &check, check.own_cut().then_some(check.scan.bytes)),
    }
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
        write(&db, &scan, 1234, None).expect("write");
        let mark = Mark {
            salts: (7, u32::MAX),
            committed: 42,
            at_ms: 1234,
            torn_at: None,
        };
        assert_eq!(read(&db), Some(mark));
        write(&db, &scan, 1234, Some(9000)).expect("write");
        let torn_at = Some(9000);
        assert_eq!(read(&db), Some(Mark { torn_at, ..mark }));
        // Written in place: a shorter record leaves nothing of the longer one.
        write(&db, &scan, 1234, None).expect("write");
        assert_eq!(read(&db), Some(mark));
        prepare(&db).expect("prepare");
        assert_eq!(read(&db), Some(mark), "a readable mark is kept");
        assert_eq!(
            std::fs::metadata(path(&db)).expect("mark").len(),
            RECORD as u64
        );
        let torn = "1 2 3 4 | 1 2 3 5";
        for nonsense in [
            "",
            "none | none",
            "1 2 3 | 1 2 3",
            "a b c d | a b c d",
            torn,
        ] {
            std::fs::write(path(&db), nonsense).expect("write");
            assert_eq!(read(&db), None, "{nonsense:?}");
        }
    }
}

//! A clean stop's seal on the database file. `quick_check` reads every page, so the
//! start's check grew with the database (115 ms for 100,000 agent records). A daemon
//! that stops cleanly empties the log into the file and writes down the file's identity
//! as it left it: device, inode, size, modification and change times. The next start
//! takes the seal away before anything else and checks the pages only when the file
//! is not exactly as sealed. Any write to the file since, by anyone, moves its change
//! time (which, unlike the modification time, no program can set back), so a file
//! overwritten or replaced after the stop is checked as before; a crash leaves no seal.
//!
//! What a seal cannot see is a disk that changes a page by itself; SQLite reports such
//! a page when it reads it, and the daemon says so then.

use super::health::sibling;
use rusqlite::Connection;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub fn path(db: &Path) -> PathBuf {
    sibling(db, "-sealed")
}

/// What the seal holds: the file as the stop left it.
fn identity(db: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(db)?;
    Ok(format!(
        "{} {} {} {}.{} {}.{}\n",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    ))
}

/// Seals the database at a clean stop: on the database thread, after the last write.
/// A log that cannot be emptied (a reader holds it) leaves no seal: the next start
/// checks.
pub fn seal(conn: &Connection, db: &Path) {
    let emptied = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        Ok(row.get::<_, i64>(0)? == 0 && row.get::<_, i64>(1)? == 0)
    });
    if !matches!(emptied, Ok(true)) {
        tracing::info!("the log could not be emptied at stop; the next start checks every page");
        return;
    }
    let sealed = identity(db).and_then(|id| write_private(&path(db), &id));
    let sealed = sealed.and_then(|()| wait_for_a_later_tick(db));
    if let Err(e) = sealed {
        let _ = std::fs::remove_file(path(db));
        tracing::info!(error = %e, "cannot seal the database at stop; the next start checks every page");
    }
}

/// Returns once the filesystem's clock gives a write a later change time than the
/// database file has: a kernel with coarse timestamps (before Linux 6.13) gives every
/// write within one tick (a few ms) the same time, and a write right after the seal
/// would then look like none. The seal file's own change time is that clock.
fn wait_for_a_later_tick(db: &Path) -> std::io::Result<()> {
    let changed = |path: &Path| std::fs::metadata(path).map(|m| (m.ctime(), m.ctime_nsec()));
    let sealed_at = changed(db)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    loop {
        let seal = std::fs::OpenOptions::new().append(true).open(path(db))?;
        // A change of mode, even to the same one, stamps the change time.
        seal.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        if changed(&path(db))? > sealed_at {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::Error::other(
                "the file clock did not move within 100 ms",
            ));
        }
        std::thread::yield_now();
    }
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// Takes the seal away and says whether the file is exactly as the last clean stop
/// left it. Called before the database opens.
pub fn take(db: &Path) -> bool {
    let seal = path(db);
    let Ok(sealed) = std::fs::read_to_string(&seal) else {
        return false;
    };
    if let Err(e) = std::fs::remove_file(&seal) {
        // A seal that stays could vouch for a later crash's file.
        tracing::warn!(error = %e, "cannot remove the database's seal; checking every page");
        return false;
    }
    identity(db).is_ok_and(|now| now == sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_db(dir: &Path) -> PathBuf {
        let db = dir.join("grove.db");
        let conn = Connection::open(&db).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .expect("write");
        seal(&conn, &db);
        db
    }

    #[test]
    fn a_file_as_sealed_is_vouched_for_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sealed_db(dir.path());
        let changed = |p: &Path| {
            let m = std::fs::metadata(p).expect("meta");
            (m.ctime(), m.ctime_nsec())
        };
        assert!(
            changed(&path(&db)) > changed(&db),
            "a write after the seal gets a later change time"
        );
        assert!(take(&db));
        assert!(!path(&db).exists(), "taken away at once");
        assert!(!take(&db), "a second start (after a crash) checks");
    }

    #[test]
    fn a_write_after_the_seal_is_seen_even_with_its_time_put_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sealed_db(dir.path());
        let before = std::fs::metadata(&db).expect("meta");
        let mut bytes = std::fs::read(&db).expect("read");
        let last = bytes.len() - 1;
        // A coarse clock may give a write right after the seal the same change time;
        // the test is about a write the clock does tell apart.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            bytes[last] ^= 0xff;
            std::fs::write(&db, &bytes).expect("overwrite");
            let now = std::fs::metadata(&db).expect("meta");
            if (now.ctime(), now.ctime_nsec()) != (before.ctime(), before.ctime_nsec()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the change time never moved"
            );
        }
        let file = std::fs::File::options()
            .write(true)
            .open(&db)
            .expect("open");
        file.set_modified(before.modified().expect("mtime"))
            .expect("put the time back");
        assert!(!take(&db));
    }
}

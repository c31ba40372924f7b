//! The daemon's records in SQLite (WAL), owned by one thread.

pub mod agents;
pub mod health;
pub mod idempotency;
pub mod mark;
mod migrations;
pub mod recover;
pub mod removals;
pub mod seal;
pub mod starts;
pub mod trust;
pub mod wal;

use crate::owner::{Owner, OwnerGone};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database {path} has schema version {found}, newer than this grove understands ({known}); upgrade grove")]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// The database or its log is damaged: the whole report (what, what may be lost,
    /// what to do), with no cause chained after it, so that it is said once.
    #[error("{0}")]
    Damaged(String),
    #[error("cannot read {}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error(transparent)]
    Gone(#[from] OwnerGone),
}

#[derive(Clone)]
pub struct Db {
    owner: Owner<Connection>,
}

impl Db {
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let path = path.to_path_buf();
        let owner = Owner::spawn("grove-db", move || open_connection(&path))?;
        Ok(Db { owner })
    }

    /// Runs `f` on the database thread.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> Result<R, DbError> {
        Ok(self.owner.call(noting_failed_writes(f)).await??)
    }

    /// Queues `f` on the database thread at once (see [`Owner::submit`]); the future
    /// gives its result.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<R, DbError>> + Send + 'static {
        let queued = self.owner.submit(noting_failed_writes(f));
        async move { Ok(queued.await??) }
    }
}

/// `f`, and after it fails a write, the note that keeps a frame it left cut short from
/// being called damage ([`mark::note_failed_write`]); nothing more when it succeeds.
fn noting_failed_writes<R>(
    f: impl FnOnce(&mut Connection) -> rusqlite::Result<R>,
) -> impl FnOnce(&mut Connection) -> rusqlite::Result<R> {
    move |conn| {
        let result = f(conn);
        if let Err(error) = &result {
            mark::note_failed_write(conn, error);
        }
        result
    }
}

/// Creates the database file 0600 so that nobody else can read it; SQLite gives its WAL
/// and shared-memory files the database's mode.
pub(crate) fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
}

/// Refuses a database whose log SQLite would read only in part. Before the connection
/// opens: SQLite's own reading of the log (at the first open after every connection has
/// gone) keeps the intact prefix and says nothing of the rest.
fn refuse_damaged_log(path: &Path) -> Result<(), DbError> {
    if let Some(pid) = health::await_sole_user(path, std::time::Duration::from_secs(1)) {
        // Refusing would lock the user out for a `sqlite3` shell left open; a reader
        // does not write the log, so the scan still holds for it.
        tracing::warn!(
            pid,
            "another process has the database open; reading its log anyway"
        );
    }
    let check = health::check_log(path).map_err(|e| DbError::Unreadable {
        path: health::wal_path(path),
        why: e.to_string(),
    })?;
    match check.report() {
        None => Ok(()),
        Some(report) => Err(DbError::Damaged(refusal(report))),
    }
}

/// Refuses a database whose pages do not hold together, before anything is written to
/// it. `quick_check` reads every page once and checks each b-tree's structure (about a
/// millisecond per MiB when cached: 55 ms for 55 MB here), which a start can afford;
/// `integrity_check` would also look up every index entry's row, a search per entry.
fn refuse_damaged_pages(conn: &Connection, path: &Path) -> Result<(), DbError> {
    let rows = run_quick_check(conn).map_err(|e| damaged_or(path, e, DbError::Sql))?;
    if rows == ["ok"] {
        return Ok(());
    }
    Err(DbError::Damaged(refusal(health::pages_report(path, &rows))))
}

fn run_quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare("PRAGMA quick_check")?;
    let rows = statement
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(rows)
}

/// A damage report as the daemon's reason not to start.
fn refusal(report: String) -> String {
    format!(
        "{report} The daemon did not start, so as not to serve from it; {}.",
        health::RECOVER_ADVICE
    )
}

/// A damaged database file is said as such (once, with what to do); any other
/// failure keeps SQLite's error.
fn damaged_or(
    path: &Path,
    error: rusqlite::Error,
    other: impl FnOnce(rusqlite::Error) -> DbError,
) -> DbError {
    if !health::is_damage(&error) {
        return other(error);
    }
    DbError::Damaged(refusal(health::database_report(path, &sqlite_says(&error))))
}

/// SQLite's own words for an error, without rusqlite's code around them.
fn sqlite_says(error: &rusqlite::Error) -> String {
    match error {
        rusqlite::Error::SqliteFailure(_, Some(message)) => message.clone(),
        error => error.to_string(),
    }
}

fn open_connection(path: &Path) -> Result<Connection, DbError> {
    let open_err = |source| {
        damaged_or(path, source, |source| DbError::Open {
            path: path.to_path_buf(),
            source,
        })
    };
    // Before anything opens the file: the seal vouches only for the file as it is now.
    let sealed = seal::take(path);
    refuse_damaged_log(path)?;
    create_private(path);
    let mut conn = Connection::open(path).map_err(open_err)?;
    // Deleted rows (a queued agent's environment, say) are overwritten, not just
    // unlinked from the b-tree: see `agents::drop_queued_env`.
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(open_err)?;
    // WAL with synchronous=FULL: every acknowledged commit survives a crash or power loss.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(open_err)?;
    if sealed {
        tracing::info!(
            "the database is as its last clean stop left it; its pages are not read again"
        );
    } else {
        refuse_damaged_pages(&conn, path)?;
    }
    migrations::migrate(&mut conn, path).map_err(|e| match e {
        DbError::Sql(source) => damaged_or(path, source, DbError::Sql),
        other => other,
    })?;
    Ok(conn)
}

/// `PRAGMA quick_check` on a read-only connection of its own, for `grove doctor`: it
/// changes nothing and runs whether a daemon holds the database or not. The rows are
/// `["ok"]` for a sound database, else the problems found.
pub fn quick_check(path: &Path) -> Result<Vec<String>, DbError> {
    use rusqlite::OpenFlags;
    let open_err = |source: rusqlite::Error| {
        if !health::is_damage(&source) {
            return DbError::Open {
                path: path.to_path_buf(),
                source,
            };
        }
        DbError::Damaged(health::database_report(path, &sqlite_says(&source)))
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(open_err)?;
    run_quick_check(&conn).map_err(open_err)
}

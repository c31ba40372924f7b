//! The daemon's records in SQLite (WAL), owned by one thread.

pub mod agents;
pub mod idempotency;
mod migrations;
pub mod removals;
pub mod starts;
pub mod trust;

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
        Ok(self.owner.call(f).await??)
    }

    /// Queues `f` on the database thread at once (see [`Owner::submit`]); the future
    /// gives its result.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<R, DbError>> + Send + 'static {
        let queued = self.owner.submit(f);
        async move { Ok(queued.await??) }
    }
}

/// Creates the database file 0600 so that nobody else can read it; SQLite gives its WAL
/// and shared-memory files the database's mode.
fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
}

fn open_connection(path: &Path) -> Result<Connection, DbError> {
    let open_err = |source| DbError::Open {
        path: path.to_path_buf(),
        source,
    };
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
    migrations::migrate(&mut conn, path)?;
    Ok(conn)
}

/// `PRAGMA quick_check` on a read-only connection of its own, for `grove doctor`: it
/// changes nothing and runs whether a daemon holds the database or not. The rows are
/// `["ok"]` for a sound database, else the problems found.
pub fn quick_check(path: &Path) -> Result<Vec<String>, DbError> {
    use rusqlite::OpenFlags;
    let open_err = |source| DbError::Open {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(open_err)?;
    let mut statement = conn.prepare("PRAGMA quick_check").map_err(open_err)?;
    let rows = statement
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
        .map_err(open_err)?;
    Ok(rows)
}

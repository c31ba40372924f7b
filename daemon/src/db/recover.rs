//! `grove daemon recover`: a damaged database (or log) is kept as it is, beside the
//! original, and replaced by what SQLite can still read of it.
//!
//! The bundled SQLite has no `.recover` (that lives in the shell) nor the `sqlite_dbpage`
//! table it is built on, so recovery takes two steps, each on a scratch copy so that the
//! damaged files are never written:
//! 1. `VACUUM INTO` a new file: SQLite reads the log as it always does (its intact
//!    prefix) and writes every row it can reach, consistent as of the last commit it
//!    read. This is the whole story when only the log was damaged.
//! 2. When that fails (pages of the database file itself do not hold together), a
//!    database with the current schema is made and each table's rows are copied over
//!    one by one, until the first row that cannot be read.

use super::health::{self, sibling, LogCheck};
use super::DbError;
use rusqlite::Connection;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What recovery did.
#[derive(Debug)]
pub struct Recovered {
    /// The copies of the damaged files, as they were found.
    pub kept: Vec<PathBuf>,
    /// The log as it was found, with its damage.
    pub log: LogCheck,
    /// Why the database file could not be copied whole (its rows were copied instead).
    pub database_problem: Option<String>,
    /// Per table, the rows the new database holds, and whether some could not be read.
    pub tables: Vec<TableCopy>,
}

#[derive(Debug, Clone)]
pub struct TableCopy {
    pub table: String,
    pub rows: u64,
    /// Rows after the first unreadable one were not reached.
    pub incomplete: bool,
}

/// Recovers the database at `db`; nothing may have it open (the caller holds the
/// daemon's lock).
pub fn recover(db: &Path, now: SystemTime) -> Result<Recovered, DbError> {
    if !db.exists() {
        return Err(DbError::Unreadable {
            path: db.to_path_buf(),
            why: "there is no database to recover".into(),
        });
    }
    if let Some(pid) = health::await_sole_user(db, std::time::Duration::from_secs(5)) {
        return Err(DbError::Unreadable {
            path: db.to_path_buf(),
            why: format!(
                "process {pid} has it open, and recovery replaces it; end that process first"
            ),
        });
    }
    let log = health::check_log(db).map_err(unreadable(&health::wal_path(db)))?;
    let stamp = stamp(now);
    let kept = keep_copies(db, &stamp)?;
    let scratch = sibling(db, &format!(".recovering-{stamp}"));
    let fresh = sibling(db, &format!(".recovered-{stamp}"));
    let result = rebuild(db, &scratch, &fresh);
    remove_with_log(&scratch);
    let (database_problem, tables) = match result {
        Ok(done) => done,
        Err(e) => {
            remove_with_log(&fresh);
            return Err(e);
        }
    };
    replace(db, &fresh)?;
    super::mark::remove(db);
    Ok(Recovered {
        kept,
        log,
        database_problem,
        tables,
    })
}

/// `20261201T224512Z`: sorts by time and needs no quoting in a shell.
fn stamp(now: SystemTime) -> String {
    humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(['-', ':'], "")
}

fn unreadable(path: &Path) -> impl FnOnce(std::io::Error) -> DbError {
    let path = path.to_path_buf();
    move |e| DbError::Unreadable {
        path,
        why: e.to_string(),
    }
}

/// Copies the database and its log, as they are, to `<name>.damaged-<stamp>` beside
/// them, flushed to disk before anything else is done.
fn keep_copies(db: &Path, stamp: &str) -> Result<Vec<PathBuf>, DbError> {
    let mut kept = Vec::new();
    for original in [db.to_path_buf(), health::wal_path(db)] {
        if !original.exists() {
            continue;
        }
        let copy = sibling(&original, &format!(".damaged-{stamp}"));
        copy_synced(&original, &copy).map_err(unreadable(&original))?;
        kept.push(copy);
    }
    Ok(kept)
}

fn copy_synced(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::copy(from, to)?;
    fs::File::open(to)?.sync_all()
}

/// Builds `fresh` from a scratch copy of the database and its log; says why the
/// database could not be copied whole, and what each table holds.
fn rebuild(
    db: &Path,
    scratch: &Path,
    fresh: &Path,
) -> Result<(Option<String>, Vec<TableCopy>), DbError> {
    copy_synced(db, scratch).map_err(unreadable(db))?;
    let wal = health::wal_path(db);
    if wal.exists() {
        copy_synced(&wal, &health::wal_path(scratch)).map_err(unreadable(&wal))?;
    }
    let source = Connection::open(scratch).map_err(DbError::Sql)?;
    match vacuum_into(&source, fresh) {
        Ok(()) => {
            drop(source);
            Ok((None, count_rows(fresh)?))
        }
        Err(problem) => {
            remove_with_log(fresh);
            let tables = copy_rows(source, scratch, fresh)?;
            Ok((Some(problem), tables))
        }
    }
}

/// The whole database as SQLite reads it into `fresh`, checked; or what went wrong.
fn vacuum_into(source: &Connection, fresh: &Path) -> Result<(), String> {
    let target = fresh.to_str().ok_or("the path is not UTF-8")?;
    // VACUUM INTO makes its file with the default mode; an empty one it fills keeps ours.
    super::create_private(fresh);
    source
        .execute("VACUUM INTO ?1", [target])
        .map_err(|e| e.to_string())?;
    let rows = super::quick_check(fresh).map_err(|e| e.to_string())?;
    if rows == ["ok"] {
        Ok(())
    } else {
        Err(rows.join("; "))
    }
}

/// A new database with the current schema, and every row of `scratch` it can read.
fn copy_rows(source: Connection, scratch: &Path, fresh: &Path) -> Result<Vec<TableCopy>, DbError> {
    drop(source);
    let mut conn = super::open_connection(fresh)?;
    // Rows come table by table: a row whose parent comes later must not be refused.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let attached = conn.execute(
        "ATTACH DATABASE ?1 AS old",
        [scratch.to_string_lossy().as_ref()],
    );
    let mut tables = Vec::new();
    for table in table_names(&conn)? {
        let copied = match attached {
            Ok(_) => copy_table(&mut conn, &table)?,
            Err(_) => (0, true),
        };
        tables.push(TableCopy {
            table,
            rows: copied.0,
            incomplete: copied.1,
        });
    }
    Ok(tables)
}

/// The tables the daemon keeps (its own bookkeeping of the schema aside).
fn table_names(conn: &Connection) -> Result<Vec<String>, DbError> {
    let mut statement = conn.prepare(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name <> 'schema_version' ORDER BY name",
    )?;
    let names = statement
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(names)
}

/// Copies the rows of `table` it can read, in one transaction; the rows copied, and
/// whether it stopped at one it could not read.
fn copy_table(conn: &mut Connection, table: &str) -> Result<(u64, bool), DbError> {
    let columns = shared_columns(conn, table);
    if columns.is_empty() {
        return Ok((0, true));
    }
    let list = columns.join(", ");
    let marks = vec!["?"; columns.len()].join(", ");
    let tx = conn.transaction()?;
    let mut copied = 0;
    let mut incomplete = false;
    {
        let mut insert = tx.prepare(&format!(
            "INSERT OR REPLACE INTO main.\"{table}\" ({list}) VALUES ({marks})"
        ))?;
        let mut select = match tx.prepare(&format!("SELECT {list} FROM old.\"{table}\"")) {
            Ok(select) => select,
            Err(_) => return Ok((0, true)),
        };
        let mut rows = select.query([])?;
        loop {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(_) => {
                    incomplete = true;
                    break;
                }
            };
            let values = (0..columns.len())
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect::<rusqlite::Result<Vec<_>>>();
            match values {
                Ok(values) => {
                    insert.execute(rusqlite::params_from_iter(values))?;
                    copied += 1;
                }
                Err(_) => incomplete = true,
            }
        }
    }
    tx.commit()?;
    Ok((copied, incomplete))
}

/// The columns `table` has both in the new schema and in the damaged database (an
/// empty list when the damaged one cannot say).
fn shared_columns(conn: &Connection, table: &str) -> Vec<String> {
    let names = |schema: &str| -> rusqlite::Result<Vec<String>> {
        let mut statement = conn.prepare(&format!("PRAGMA {schema}.table_info(\"{table}\")"))?;
        let names = statement
            .query_map([], |row| row.get::<_, String>(1))?
            .collect();
        names
    };
    let (Ok(new), Ok(old)) = (names("main"), names("old")) else {
        return Vec::new();
    };
    new.into_iter()
        .filter(|c| old.contains(c))
        .map(|c| format!("\"{c}\""))
        .collect()
}

/// The rows of each table of a database SQLite could copy whole.
fn count_rows(db: &Path) -> Result<Vec<TableCopy>, DbError> {
    let conn = Connection::open(db)?;
    table_names(&conn)?
        .into_iter()
        .map(|table| {
            let rows: i64 =
                conn.query_row(&format!("SELECT COUNT(*) FROM \"{table}\""), [], |r| {
                    r.get(0)
                })?;
            Ok(TableCopy {
                table,
                rows: rows as u64,
                incomplete: false,
            })
        })
        .collect()
}

/// Puts `fresh` in the place of `db`. The old log goes first: left beside the new file
/// it would be read into it (a log does not say which database it belongs to). Its
/// copy is kept.
fn replace(db: &Path, fresh: &Path) -> Result<(), DbError> {
    for stale in [health::wal_path(db), sibling(db, "-shm")] {
        match fs::remove_file(&stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(unreadable(&stale)(e)),
        }
    }
    sync_dir(db);
    fs::rename(fresh, db).map_err(unreadable(fresh))?;
    sync_dir(db);
    Ok(())
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
}

/// Removes a database file of recovery's own and whatever SQLite kept beside it.
fn remove_with_log(path: &Path) {
    for file in [
        path.to_path_buf(),
        health::wal_path(path),
        sibling(path, "-shm"),
    ] {
        let _ = fs::remove_file(file);
    }
}

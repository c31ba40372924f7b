//! The removal log: every worktree grove deleted, why, and where its work went.

use grove_proto::types::Removal;
use rusqlite::{params, Connection};
use serde::de::DeserializeOwned;

pub fn record(conn: &Connection, removal: &Removal) -> rusqlite::Result<()> {
    let json = serde_json::to_string(removal)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    conn.execute(
        "INSERT INTO removals (at_ms, record) VALUES (?1, ?2)",
        params![removal.at_ms as i64, json],
    )?;
    Ok(())
}

/// The most recent `limit` removals, oldest first.
pub fn recent(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<Removal>> {
    recent_in(conn, "removals", limit)
}

/// The most recent `limit` records of a removal log (`removals`, or the sessions'
/// `session_removals`), oldest first; a record that no longer decodes is skipped.
pub fn recent_in<T: DeserializeOwned>(
    conn: &Connection,
    log: &str,
    limit: u32,
) -> rusqlite::Result<Vec<T>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT record FROM (SELECT seq, record FROM {log} ORDER BY seq DESC LIMIT ?1)
         ORDER BY seq"
    ))?;
    let rows = stmt.query_map([limit], |r| r.get::<_, String>(0))?;
    Ok(rows
        .filter_map(Result::ok)
        .filter_map(|json| serde_json::from_str(&json).ok())
        .collect())
}

//! Idempotency keys: a request that changed something, by the key its client chose,
//! with what it answered. Written in the same transaction as the effect where the
//! effect is a row of its own (a checkpoint), before the effect where it is not (an
//! agent: a key whose agent never came to be is no answer), so that a retry after a
//! crash finds either the effect with its key or neither.

use grove_proto::now_ms;
use rusqlite::{params, Connection, OptionalExtension};

/// How long a key is kept: longer than any client retries.
pub const KEEP_MS: u64 = 24 * 3600 * 1000;

/// Stores `key` with its method and answer now, dropping keys past [`KEEP_MS`].
pub fn record(conn: &Connection, key: &str, method: &str, answer: &str) -> rusqlite::Result<()> {
    let now = now_ms();
    prune(conn, now)?;
    insert(conn, key, method, answer, now)
}

/// Drops keys past [`KEEP_MS`] at `now_ms`: once per transaction is enough (a group of
/// state updates stores hundreds of keys in one).
pub fn prune(conn: &Connection, now_ms: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM idempotency WHERE at_ms < ?1")?
        .execute([now_ms.saturating_sub(KEEP_MS) as i64])?;
    Ok(())
}

/// Stores `key` with its method and answer.
pub fn insert(
    conn: &Connection,
    key: &str,
    method: &str,
    answer: &str,
    at_ms: u64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO idempotency (key, method, answer, at_ms) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![key, method, answer, at_ms as i64])?;
    Ok(())
}

/// The method and answer stored under `key`, if it was seen within [`KEEP_MS`].
pub fn find(
    conn: &Connection,
    key: &str,
    now_ms: u64,
) -> rusqlite::Result<Option<(String, String)>> {
    conn.prepare_cached("SELECT method, answer FROM idempotency WHERE key = ?1 AND at_ms >= ?2")?
        .query_row(params![key, now_ms.saturating_sub(KEEP_MS) as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
}

/// Forgets `key` (its effect turned out never to have happened).
pub fn forget(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM idempotency WHERE key = ?1", [key])?;
    Ok(())
}

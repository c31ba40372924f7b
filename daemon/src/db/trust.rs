//! Approved `.grove.toml` content, one hash per repository (`grove trust`).

use rusqlite::{params, Connection, OptionalExtension};

/// The approved hash for `repo`, if any.
pub fn approved(conn: &Connection, repo: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT sha256 FROM trusted_config WHERE repo = ?1",
        [repo],
        |r| r.get(0),
    )
    .optional()
}

/// Approves `sha256` for `repo`, replacing what was approved before.
pub fn approve(conn: &Connection, repo: &str, sha256: &str, at_ms: u64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO trusted_config (repo, sha256, at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT(repo) DO UPDATE SET sha256 = excluded.sha256, at_ms = excluded.at_ms",
        params![repo, sha256, at_ms as i64],
    )?;
    Ok(())
}

/// Withdraws the approval for `repo`; true when there was one.
pub fn revoke(conn: &Connection, repo: &str) -> rusqlite::Result<bool> {
    Ok(conn.execute("DELETE FROM trusted_config WHERE repo = ?1", [repo])? > 0)
}

//! The migration chain. Each entry moves the schema one version up; entries are never
//! edited once released, only appended.

use super::DbError;
use rusqlite::{Connection, OptionalExtension};
use std::path::Path;

const MIGRATIONS: &[&str] = &[
    // 1: agents. The full record is JSON; the columns we filter on are lifted out.
    "CREATE TABLE agents (
        id            TEXT PRIMARY KEY,
        status        TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        token         TEXT NOT NULL,
        pid_start     INTEGER,
        record        TEXT NOT NULL
    );
    CREATE INDEX agents_by_status ON agents(status);",
    // 2: removals (what grove deleted, why, where the work went) and the environment of
    // queued agents, kept only until they start.
    "CREATE TABLE removals (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms           INTEGER NOT NULL,
        record          TEXT NOT NULL
    );
    CREATE TABLE queued_env (
        agent_id        TEXT PRIMARY KEY,
        env             TEXT NOT NULL
    );",
    // 3: sessions and their shared state: a write log (one row per checkpoint) plus
    // periodic full snapshots, so any checkpoint reads as one snapshot plus a few batches.
    "CREATE TABLE sessions (
        name            TEXT PRIMARY KEY,
        schema          TEXT NOT NULL,
        schema_version  INTEGER NOT NULL,
        created_at_ms   INTEGER NOT NULL,
        forked_from     TEXT,
        forked_at       INTEGER,
        head            INTEGER NOT NULL,
        oldest          INTEGER NOT NULL,
        last_at_ms      INTEGER,
        last_changes    TEXT NOT NULL
    );
    CREATE TABLE checkpoints (
        session         TEXT NOT NULL,
        id              INTEGER NOT NULL,
        parent          INTEGER,
        parent_session  TEXT,
        at_ms           INTEGER NOT NULL,
        writer          TEXT NOT NULL,
        source          TEXT NOT NULL,
        channels        TEXT NOT NULL,
        writes          TEXT NOT NULL,
        schema_version  INTEGER NOT NULL,
        PRIMARY KEY (session, id)
    ) WITHOUT ROWID;
    CREATE TABLE snapshots (
        session         TEXT NOT NULL,
        id              INTEGER NOT NULL,
        state           TEXT NOT NULL,
        PRIMARY KEY (session, id)
    ) WITHOUT ROWID;",
    // 4: the `.grove.toml` content the user approved per repository (`grove trust`):
    // its setup commands run only while the file still hashes to this.
    "CREATE TABLE trusted_config (
        repo            TEXT PRIMARY KEY,
        sha256          TEXT NOT NULL,
        at_ms           INTEGER NOT NULL
    );",
    // 5: checkpoints the user pinned (`grove state pin`): compaction keeps them readable.
    "CREATE TABLE pins (
        session         TEXT NOT NULL,
        id              INTEGER NOT NULL,
        at_ms           INTEGER NOT NULL,
        PRIMARY KEY (session, id)
    ) WITHOUT ROWID;",
    // 6: the audit row of every deleted session (`grove session rm`): who, when, why,
    // how big. The session's own rows go; this stays.
    "CREATE TABLE session_removals (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms           INTEGER NOT NULL,
        record          TEXT NOT NULL
    );",
    // 7: session lifecycle: the last read or write, the state the GC pass left it in,
    // and its size, so that a session whose head is not in memory is shown without
    // reading it.
    "ALTER TABLE sessions ADD COLUMN last_used_ms INTEGER;
    ALTER TABLE sessions ADD COLUMN lifecycle TEXT NOT NULL DEFAULT 'active';
    ALTER TABLE sessions ADD COLUMN state_bytes INTEGER NOT NULL DEFAULT 0;",
    // 8: the schemas a session had before `grove session migrate`: each reads the
    // checkpoints before `until_id`, so that history still reads with its own schema.
    "CREATE TABLE session_schemas (
        session         TEXT NOT NULL,
        until_id        INTEGER NOT NULL,
        schema          TEXT NOT NULL,
        PRIMARY KEY (session, until_id)
    ) WITHOUT ROWID;",
    // 9: every daemon start, and whether the daemon before it stopped cleanly (the
    // restart counters of `grove metrics`).
    "CREATE TABLE daemon_starts (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at_ms   INTEGER NOT NULL,
        pid             INTEGER NOT NULL,
        previous        TEXT NOT NULL,
        stopped_at_ms   INTEGER
    );",
    // 10: idempotency keys of requests that changed something, with their answer (or,
    // for agent.spawn, the agent made), kept a day for the client's retries.
    "CREATE TABLE idempotency (
        key             TEXT PRIMARY KEY,
        method          TEXT NOT NULL,
        answer          TEXT NOT NULL,
        at_ms           INTEGER NOT NULL
    );
    CREATE INDEX idempotency_by_age ON idempotency(at_ms);",
    // 11: the code an agent had when it wrote a checkpoint (JSON `{commit, tree}`),
    // null for the user's writes and for checkpoints stored before it; an agent's
    // automatic session is `reserved` (stored with its schema, shown nowhere) until the
    // agent first writes it.
    "ALTER TABLE checkpoints ADD COLUMN code TEXT;
    ALTER TABLE sessions ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0;",
    // 12: the channels the migration that ended a kept schema's era renamed (JSON, old
    // name to new; null: none), so that a fork carried forward through it keeps them.
    "ALTER TABLE session_schemas ADD COLUMN renames TEXT;",
    // 13: an archived session's snapshots' `state` and checkpoints' `writes` may hold a
    // BLOB, the deflated JSON (sessions/packed.rs). No column changes; the step is here
    // so that an older grove, which would fail to read such a value, refuses the
    // database as newer than it instead.
    "-- no statement: the values change, not the columns",
];

pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), DbError> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let current: i64 = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(DbError::TooNew {
            path: path.to_path_buf(),
            found: current,
            known,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [index as i64 + 1],
        )?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_newer_schemas() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.db");
        let mut conn = Connection::open(&path).expect("open");
        migrate(&mut conn, &path).expect("first");
        migrate(&mut conn, &path).expect("idempotent");
        conn.execute("UPDATE schema_version SET version = 99", [])
            .expect("bump");
        let err = migrate(&mut conn, &path).expect_err("too new");
        assert!(err.to_string().contains("newer than this grove"), "{err}");
    }
}

//! Sessions, checkpoints and snapshots in SQLite. Runs on the database thread.

use super::budget::{AgentRow, WriterBytes};
use grove_proto::state::CheckpointInfo;
use grove_state::{replay_batch, LastChange, Schema, State, Write};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

/// A full snapshot is stored after every this many checkpoints, so reading any
/// checkpoint costs one snapshot plus at most this many batches.
pub const SNAPSHOT_EVERY: u64 = 64;

fn json_err(e: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(e.into())
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str, column: usize) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, e.into())
    })
}

#[derive(Debug, Clone)]
pub struct SessionRow {
    pub name: String,
    pub schema: serde_json::Value,
    pub schema_version: u32,
    pub created_at_ms: u64,
    pub forked_from: Option<String>,
    pub forked_at: Option<u64>,
    pub head: u64,
    pub oldest: u64,
    pub last_at_ms: Option<u64>,
    pub last_changes: HashMap<String, LastChange>,
    pub last_used_ms: Option<u64>,
    pub lifecycle: String,
    pub state_bytes: u64,
    /// An agent's automatic session its agent has not written yet.
    pub reserved: bool,
}

/// One checkpoint to store, its JSON already written: the state task writes it while
/// the database thread stores the group before, so that the database thread only runs
/// statements.
#[derive(Debug, Clone)]
pub struct CheckpointRow {
    pub session: String,
    pub info: CheckpointInfo,
    channels: String,
    writes: String,
    code: Option<String>,
    /// The state right after this checkpoint, when a snapshot is due.
    snapshot: Option<String>,
    /// The update's idempotency key and its answer, stored with the checkpoint.
    idempotency: Option<(String, String)>,
}

impl CheckpointRow {
    pub fn new(
        session: &str,
        info: CheckpointInfo,
        writes: &[Write],
        snapshot: Option<&State>,
    ) -> serde_json::Result<CheckpointRow> {
        Ok(CheckpointRow {
            session: session.to_string(),
            channels: serde_json::to_string(&info.channels)?,
            writes: serde_json::to_string(writes)?,
            code: info.code.as_ref().map(serde_json::to_string).transpose()?,
            snapshot: snapshot.map(serde_json::to_string).transpose()?,
            info,
            idempotency: None,
        })
    }

    /// What this row counts against its writer's tree (`tree_max_db`): the same sum
    /// [`writer_bytes`] reads back from the stored row.
    pub fn bytes(&self) -> u64 {
        let text = [&self.writes, &self.channels];
        let optional = [&self.code, &self.snapshot];
        super::budget::ROW_BYTES
            + text.iter().map(|t| t.len() as u64).sum::<u64>()
            + optional
                .iter()
                .flat_map(|t| t.as_ref())
                .map(|t| t.len() as u64)
                .sum::<u64>()
    }

    /// Stores `key` with this checkpoint (in its transaction), answering what
    /// `state.update` answered.
    pub fn with_key(mut self, key: Option<String>) -> CheckpointRow {
        self.idempotency = key.map(|key| {
            let answer = serde_json::json!({ "session": self.session, "checkpoint": self.info.id });
            (key, answer.to_string())
        });
        self
    }
}

/// Where a session stands after a group of updates: what storing the group changes in
/// its row.
#[derive(Debug, Clone)]
pub struct SessionHead {
    pub name: String,
    pub head: u64,
    pub oldest: u64,
    pub last_at_ms: Option<u64>,
    last_changes: String,
    pub state_bytes: u64,
}

impl SessionHead {
    pub fn new(
        name: &str,
        head: u64,
        oldest: u64,
        last_at_ms: Option<u64>,
        last_changes: &HashMap<String, LastChange>,
        state_bytes: u64,
    ) -> serde_json::Result<SessionHead> {
        Ok(SessionHead {
            name: name.to_string(),
            head,
            oldest,
            last_at_ms,
            last_changes: serde_json::to_string(last_changes)?,
            state_bytes,
        })
    }
}

pub fn upsert_session(conn: &Connection, row: &SessionRow) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO sessions (name, schema, schema_version, created_at_ms, forked_from,
                               forked_at, head, oldest, last_at_ms, last_changes,
                               last_used_ms, lifecycle, state_bytes, reserved)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT(name) DO UPDATE SET head = ?7, oldest = ?8, last_at_ms = ?9,
                                          last_changes = ?10, last_used_ms = ?11,
                                          lifecycle = ?12, state_bytes = ?13,
                                          reserved = ?14",
        params![
            row.name,
            row.schema.to_string(),
            row.schema_version,
            row.created_at_ms as i64,
            row.forked_from,
            row.forked_at.map(|v| v as i64),
            row.head as i64,
            row.oldest as i64,
            row.last_at_ms.map(|v| v as i64),
            serde_json::to_string(&row.last_changes).map_err(json_err)?,
            row.last_used_ms.map(|v| v as i64),
            row.lifecycle,
            row.state_bytes as i64,
            row.reserved,
        ],
    )?;
    Ok(())
}

// Statements run for every update are prepared once per connection (prepare_cached).
fn insert_checkpoint(conn: &Connection, row: &CheckpointRow) -> rusqlite::Result<()> {
    let info = &row.info;
    conn.prepare_cached(
        "INSERT INTO checkpoints (session, id, parent, parent_session, at_ms, writer, source,
                                  channels, writes, schema_version, code)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        row.session,
        info.id as i64,
        info.parent.map(|v| v as i64),
        info.parent_session,
        info.at_ms as i64,
        info.writer,
        info.source,
        row.channels,
        row.writes,
        info.schema_version,
        row.code,
    ])?;
    if let Some((key, answer)) = &row.idempotency {
        crate::db::idempotency::insert(conn, key, "state.update", answer, info.at_ms)?;
    }
    if let Some(state) = &row.snapshot {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO snapshots (session, id, state) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![row.session, info.id as i64, state])?;
    }
    Ok(())
}

fn advance_session(conn: &Connection, head: &SessionHead) -> rusqlite::Result<()> {
    let changed = conn
        .prepare_cached(
            "UPDATE sessions SET head = ?2, oldest = ?3, last_at_ms = ?4, last_changes = ?5,
                                 last_used_ms = ?4, lifecycle = 'active', state_bytes = ?6,
                                 reserved = 0
             WHERE name = ?1",
        )?
        .execute(params![
            head.name,
            head.head as i64,
            head.oldest as i64,
            head.last_at_ms.map(|v| v as i64),
            head.last_changes,
            head.state_bytes as i64,
        ])?;
    // Every session is stored when it is created; one that is not must not take
    // checkpoints (the group fails and is undone).
    match changed {
        1 => Ok(()),
        _ => Err(rusqlite::Error::QueryReturnedNoRows),
    }
}

/// Stores a group of checkpoints and where they left their sessions, in one
/// transaction: one fsync acknowledges them all.
/// The compactions that came due go in the same transaction, after the checkpoints:
/// no group waits for a compaction of its own, and no compaction for an fsync of its own.
pub fn commit_group(
    conn: &mut Connection,
    checkpoints: &[CheckpointRow],
    heads: &[SessionHead],
    compactions: &[Compaction],
) -> rusqlite::Result<(Vec<DroppedCode>, WriterBytes)> {
    let tx = conn.transaction()?;
    if let Some(last) = checkpoints.iter().rfind(|row| row.idempotency.is_some()) {
        crate::db::idempotency::prune(&tx, last.info.at_ms)?;
    }
    for row in checkpoints {
        insert_checkpoint(&tx, row)?;
    }
    for head in heads {
        advance_session(&tx, head)?;
    }
    let mut dropped = Vec::with_capacity(compactions.len());
    let mut freed = WriterBytes::new();
    for c in compactions {
        let before = session_writer_bytes(&tx, &c.session)?;
        dropped.push(drop_before(&tx, &c.session, c.oldest, &c.schema, &c.pins)?.1);
        let after = session_writer_bytes(&tx, &c.session)?;
        for (writer, bytes) in super::budget::difference(&before, &after) {
            *freed.entry(writer).or_default() += bytes;
        }
        crate::faults::point("mid_compaction");
    }
    crate::faults::point("mid_state_commit");
    tx.commit()?;
    Ok((dropped, freed))
}

/// What each agent writer's stored checkpoints count against its tree (see
/// [`CheckpointRow::bytes`]), among the checkpoints `filter` selects (alias `c`): the
/// rows, then the snapshots stored with them (few: one per `SNAPSHOT_EVERY`).
/// `octet_length` reads the sizes in the rows' headers, not the values.
fn writer_bytes<P: rusqlite::Params + Copy>(
    conn: &Connection,
    filter: &str,
    args: P,
) -> rusqlite::Result<WriterBytes> {
    let rows = format!(
        "SELECT c.writer, sum({} + octet_length(c.writes) + octet_length(c.channels)
                           + coalesce(octet_length(c.code), 0))
         FROM checkpoints c WHERE c.writer != 'user' AND {filter} GROUP BY c.writer",
        super::budget::ROW_BYTES
    );
    let snapshots = format!(
        "SELECT c.writer, sum(octet_length(s.state))
         FROM snapshots s JOIN checkpoints c ON c.session = s.session AND c.id = s.id
         WHERE c.writer != 'user' AND {filter} GROUP BY c.writer"
    );
    let mut bytes = WriterBytes::new();
    for sql in [rows, snapshots] {
        let mut stmt = conn.prepare_cached(&sql)?;
        let found = stmt.query_map(args, |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in found {
            let (writer, n) = row?;
            *bytes.entry(writer).or_default() += n;
        }
    }
    Ok(bytes)
}

/// [`writer_bytes`] of one session's checkpoints.
pub fn session_writer_bytes(conn: &Connection, session: &str) -> rusqlite::Result<WriterBytes> {
    writer_bytes(conn, "c.session = ?1", [session])
}

/// [`writer_bytes`] of the sessions from `from` up to `to` (not included; `None`: all
/// after), for the trees' count at start, read a range at a time.
pub fn range_writer_bytes(
    conn: &Connection,
    from: &str,
    to: Option<&str>,
) -> rusqlite::Result<WriterBytes> {
    // Two statements: an `OR` would keep SQLite from seeking to the range.
    match to {
        Some(to) => writer_bytes(
            conn,
            "c.session >= ?1 AND c.session < ?2",
            params![from, to],
        ),
        None => writer_bytes(conn, "c.session >= ?1", [from]),
    }
}

/// One page of the agents on record, for the trees' count at start: the `limit` after
/// rowid `after`, each with its rowid, its parent and the bytes of its record, its
/// queued environment and the row of its own session (one its parent's is not: the
/// spawn stored its schema).
pub fn agent_rows_page(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, AgentRow)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "WITH page AS (
             SELECT a.rowid AS rowid, a.id AS id, a.record AS record,
                    json_extract(a.record, '$.parent') AS parent,
                    json_extract(a.record, '$.session') AS session
             FROM agents a WHERE a.rowid > ?1 ORDER BY a.rowid LIMIT ?2)
         SELECT rowid, id, parent,
                {} + octet_length(record)
                + coalesce((SELECT octet_length(q.env) FROM queued_env q
                            WHERE q.agent_id = page.id), 0)
                + coalesce((SELECT octet_length(s.schema) FROM sessions s
                            WHERE s.name = page.session
                              AND s.name IS NOT (SELECT json_extract(p.record, '$.session')
                                                 FROM agents p WHERE p.id = page.parent)), 0)
         FROM page ORDER BY rowid",
        super::budget::ROW_BYTES
    ))?;
    let rows = stmt.query_map(params![after, limit as i64], |r| {
        let bytes = r.get::<_, i64>(3)?.max(0) as u64;
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?, bytes)))
    })?;
    rows.collect()
}

/// Stores a new session forked from another, with its first checkpoint.
pub fn commit_fork(
    conn: &mut Connection,
    first: &CheckpointRow,
    session: &SessionRow,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    upsert_session(&tx, session)?;
    insert_checkpoint(&tx, first)?;
    tx.commit()
}

const SESSION_COLUMNS: &str = "name, schema, schema_version, created_at_ms, forked_from,
    forked_at, head, oldest, last_at_ms, last_changes, last_used_ms, lifecycle, state_bytes,
    reserved";

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    session_row_with(r, from_json(&r.get::<_, String>(1)?, 1)?)
}

/// A session's row with `schema` for its schema (column 1 is left to the caller).
fn session_row_with(
    r: &rusqlite::Row<'_>,
    schema: serde_json::Value,
) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        name: r.get(0)?,
        schema,
        schema_version: r.get(2)?,
        created_at_ms: r.get::<_, i64>(3)? as u64,
        forked_from: r.get(4)?,
        forked_at: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
        head: r.get::<_, i64>(6)? as u64,
        oldest: r.get::<_, i64>(7)? as u64,
        last_at_ms: r.get::<_, Option<i64>>(8)?.map(|v| v as u64),
        last_changes: from_json(&r.get::<_, String>(9)?, 9)?,
        last_used_ms: r.get::<_, Option<i64>>(10)?.map(|v| v as u64),
        lifecycle: r.get(11)?,
        state_bytes: r.get::<_, i64>(12)?.max(0) as u64,
        reserved: r.get(13)?,
    })
}

/// One page of the stored sessions: the `limit` rows after rowid `after`, each with its
/// rowid and its schema as stored (text), its `schema` left `null`: thousands of
/// sessions share a few schemas, which the caller parses once each.
pub fn load_sessions_page(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, SessionRow, String)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS}, rowid FROM sessions WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![after, limit as i64], |r| {
        let row = session_row_with(r, serde_json::Value::Null)?;
        Ok((r.get::<_, i64>(14)?, row, r.get::<_, String>(1)?))
    })?;
    rows.collect()
}

/// One page of the stored sessions as dormant (`dormant.rs`): the `limit` rows after
/// rowid `after`, each with its rowid and name.
pub fn dormant_page(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, Box<str>, super::dormant::Dormant)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT rowid, name, coalesce(last_at_ms, created_at_ms),
                coalesce(last_used_ms, last_at_ms, created_at_ms), lifecycle, reserved
         FROM sessions WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit as i64], |r| {
        let dormant = super::dormant::Dormant {
            written_ms: r.get::<_, i64>(2)? as u64,
            last_used_ms: r.get::<_, i64>(3)? as u64,
            lifecycle: super::session::Lifecycle::parse(r.get_ref(4)?.as_str()?),
            reserved: r.get(5)?,
        };
        Ok((r.get(0)?, r.get::<_, String>(1)?.into_boxed_str(), dormant))
    })?;
    rows.collect()
}

pub fn load_session(conn: &Connection, name: &str) -> rusqlite::Result<Option<SessionRow>> {
    conn.query_row(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE name = ?1"),
        [name],
        session_row,
    )
    .optional()
}

/// The state right after checkpoint `at` (0: the initial state): the newest snapshot at
/// or before it, plus the batches after that snapshot, replayed.
pub fn state_at(
    conn: &Connection,
    session: &str,
    schema: &Schema,
    at: u64,
) -> rusqlite::Result<State> {
    let snapshot: Option<(i64, String)> = conn
        .query_row(
            "SELECT id, state FROM snapshots WHERE session = ?1 AND id <= ?2
             ORDER BY id DESC LIMIT 1",
            params![session, at as i64],
            |r| Ok((r.get(0)?, super::packed::json_text(r, 1)?)),
        )
        .optional()?;
    // Checkpoints before a migration read with the schema they were written with.
    let older = super::eras::schema_at(conn, session, at)?;
    let schema = older.as_ref().unwrap_or(schema);
    let (from, mut state) = match snapshot {
        Some((id, json)) => (id as u64, from_json::<State>(&json, 1)?),
        None => (0, schema.initial_state()),
    };
    let mut stmt = conn.prepare_cached(
        "SELECT writes FROM checkpoints WHERE session = ?1 AND id > ?2 AND id <= ?3 ORDER BY id",
    )?;
    let batches = stmt.query_map(params![session, from as i64, at as i64], |r| {
        super::packed::json_text(r, 0)
    })?;
    for batch in batches {
        let writes: Vec<Write> = from_json(&batch?, 0)?;
        state = replay_batch(schema, &state, &writes)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    }
    Ok(state)
}

/// The newest `limit` checkpoints older than `before`, newest first.
pub fn history(
    conn: &Connection,
    session: &str,
    limit: u32,
    before: Option<u64>,
) -> rusqlite::Result<Vec<CheckpointInfo>> {
    let before = before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let mut stmt = conn.prepare(
        "SELECT id, parent, parent_session, at_ms, writer, source, channels, schema_version,
                code
         FROM checkpoints WHERE session = ?1 AND id < ?3 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![session, limit, before], |r| {
        Ok(CheckpointInfo {
            id: r.get::<_, i64>(0)? as u64,
            parent: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
            parent_session: r.get(2)?,
            at_ms: r.get::<_, i64>(3)? as u64,
            writer: r.get(4)?,
            source: r.get(5)?,
            channels: from_json(&r.get::<_, String>(6)?, 6)?,
            schema_version: r.get(7)?,
            code: r
                .get::<_, Option<String>>(8)?
                .map(|code| from_json(&code, 8))
                .transpose()?,
        })
    })?;
    rows.collect()
}

/// The code recorded with one checkpoint, if any.
pub fn checkpoint_code(
    conn: &Connection,
    session: &str,
    id: u64,
) -> rusqlite::Result<Option<grove_proto::state::CodeRef>> {
    let code: Option<Option<String>> = conn
        .prepare_cached("SELECT code FROM checkpoints WHERE session = ?1 AND id = ?2")?
        .query_row(params![session, id as i64], |r| r.get(0))
        .optional()?;
    code.flatten().map(|code| from_json(&code, 0)).transpose()
}

/// Drops every checkpoint before `oldest` but the pinned ones, after storing the state
/// at `oldest` and at each pin as snapshots, so that they and every later checkpoint
/// read exactly as before.
pub fn compact(
    conn: &mut Connection,
    session: &SessionRow,
    schema: &Schema,
    pins: &BTreeSet<u64>,
) -> rusqlite::Result<(u64, DroppedCode)> {
    let tx = conn.transaction()?;
    let dropped = drop_before(&tx, &session.name, session.oldest, schema, pins)?;
    upsert_session(&tx, session)?;
    tx.commit()?;
    Ok(dropped)
}

/// A compaction that goes with a group of updates (see [`commit_group`]): the session
/// keeps its checkpoints from `oldest` on, and the pinned ones.
#[derive(Debug, Clone)]
pub struct Compaction {
    pub session: String,
    pub oldest: u64,
    pub schema: Schema,
    pub pins: BTreeSet<u64>,
}

/// The work of a compaction inside the caller's transaction: snapshots at `oldest` and
/// at each older pin first, then the rows before `oldest` go, and the session row says
/// where it starts now.
fn drop_before(
    tx: &Connection,
    name: &str,
    oldest: u64,
    schema: &Schema,
    pins: &BTreeSet<u64>,
) -> rusqlite::Result<(u64, DroppedCode)> {
    let mut kept = vec![oldest];
    kept.extend(pins.iter().copied().filter(|&pin| pin < oldest));
    for id in kept {
        let state = serde_json::to_string(&state_at(tx, name, schema, id)?).map_err(json_err)?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO snapshots (session, id, state) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![name, id as i64, state])?;
    }
    let code = dropped_code(tx, name, Dropping::Before(oldest))?;
    let pinned = "(SELECT id FROM pins WHERE session = ?1)";
    tx.prepare_cached(&format!(
        "DELETE FROM snapshots WHERE session = ?1 AND id < ?2 AND id NOT IN {pinned}"
    ))?
    .execute(params![name, oldest as i64])?;
    let dropped = tx
        .prepare_cached(&format!(
            "DELETE FROM checkpoints WHERE session = ?1 AND id < ?2 AND id NOT IN {pinned}"
        ))?
        .execute(params![name, oldest as i64])?;
    tx.prepare_cached("UPDATE sessions SET oldest = ?2 WHERE name = ?1 AND oldest < ?2")?
        .execute(params![name, oldest as i64])?;
    Ok((dropped as u64, code))
}

/// Bytes a session's checkpoints and snapshots take.
pub fn stored_bytes(conn: &Connection, name: &str) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT (SELECT coalesce(sum(length(writes) + length(channels)), 0)
                 FROM checkpoints WHERE session = ?1)
              + (SELECT coalesce(sum(length(state)), 0) FROM snapshots WHERE session = ?1)",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
}

/// Deletes a session with everything it holds and keeps its audit row, in one
/// transaction: either both happened or neither.
pub fn remove_session(
    conn: &mut Connection,
    removal: &grove_proto::state::SessionRemoval,
) -> rusqlite::Result<DroppedCode> {
    let record = serde_json::to_string(removal).map_err(json_err)?;
    let tx = conn.transaction()?;
    let code = dropped_code(&tx, &removal.session, Dropping::All)?;
    for table in ["snapshots", "checkpoints", "pins", "session_schemas"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE session = ?1"),
            [&removal.session],
        )?;
    }
    tx.execute("DELETE FROM sessions WHERE name = ?1", [&removal.session])?;
    tx.execute(
        "INSERT INTO session_removals (at_ms, record) VALUES (?1, ?2)",
        params![removal.at_ms as i64, record],
    )?;
    crate::faults::point("mid_session_rm");
    tx.commit()?;
    Ok(code)
}

/// The most recent `limit` session removals, oldest first.
pub fn recent_removals(
    conn: &Connection,
    limit: u32,
) -> rusqlite::Result<Vec<grove_proto::state::SessionRemoval>> {
    crate::db::removals::recent_in(conn, "session_removals", limit)
}

/// Deletes a session with everything it holds.
pub fn delete_session(conn: &mut Connection, name: &str) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    tx.execute("DELETE FROM snapshots WHERE session = ?1", [name])?;
    tx.execute("DELETE FROM checkpoints WHERE session = ?1", [name])?;
    tx.execute("DELETE FROM pins WHERE session = ?1", [name])?;
    tx.execute("DELETE FROM sessions WHERE name = ?1", [name])?;
    tx.commit()
}

pub fn session_pins(conn: &Connection, session: &str) -> rusqlite::Result<BTreeSet<u64>> {
    let mut stmt = conn.prepare("SELECT id FROM pins WHERE session = ?1")?;
    let rows = stmt.query_map([session], |r| Ok(r.get::<_, i64>(0)? as u64))?;
    rows.collect()
}

/// Pins checkpoint `id`, or unpins it; an unpinned checkpoint older than `oldest` goes
/// at once, as compaction would have taken it.
pub fn set_pin(
    conn: &mut Connection,
    session: &str,
    id: u64,
    pinned: bool,
    oldest: u64,
) -> rusqlite::Result<Option<DroppedCode>> {
    let tx = conn.transaction()?;
    let mut code = None;
    if pinned {
        tx.execute(
            "INSERT OR IGNORE INTO pins (session, id, at_ms) VALUES (?1, ?2, ?3)",
            params![session, id as i64, grove_proto::now_ms() as i64],
        )?;
    } else {
        tx.execute(
            "DELETE FROM pins WHERE session = ?1 AND id = ?2",
            params![session, id as i64],
        )?;
        if id < oldest {
            code = Some(dropped_code(&tx, session, Dropping::One(id))?);
            for table in ["checkpoints", "snapshots"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE session = ?1 AND id = ?2"),
                    params![session, id as i64],
                )?;
            }
        }
    }
    tx.commit()?;
    Ok(code)
}

/// Stores where the GC pass left sessions: their lifecycle state and last use. An
/// archived session's history is packed in the same transaction (see `packed`); what
/// that changed in each writer's stored bytes is returned.
pub fn set_lifecycles(
    conn: &mut Connection,
    rows: &[(String, String, u64)],
) -> rusqlite::Result<WriterBytes> {
    let tx = conn.transaction()?;
    let mut delta = WriterBytes::new();
    for (name, lifecycle, last_used_ms) in rows {
        tx.prepare_cached("UPDATE sessions SET lifecycle = ?2, last_used_ms = ?3 WHERE name = ?1")?
            .execute(params![name, lifecycle, *last_used_ms as i64])?;
        if lifecycle == "archived" {
            for (writer, bytes) in super::packed::pack_session(&tx, name)? {
                *delta.entry(writer).or_default() += bytes;
            }
        }
    }
    crate::faults::point("mid_session_gc");
    tx.commit()?;
    Ok(delta)
}

/// The schema a migration leaves behind, with the renames (JSON) that migration made.
pub struct KeptSchema {
    pub schema: serde_json::Value,
    pub renames: Option<String>,
}

/// Stores a schema migration: the old schema kept for the checkpoints before `first`,
/// the migration's checkpoint (with a snapshot of the migrated state), and the session
/// with its new schema, in one transaction.
pub fn commit_migrate(
    conn: &mut Connection,
    old: &KeptSchema,
    first: &CheckpointRow,
    head: &SessionHead,
    new_schema: &serde_json::Value,
    schema_version: u32,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    tx.execute(
        "INSERT OR REPLACE INTO session_schemas (session, until_id, schema, renames)
         VALUES (?1, ?2, ?3, ?4)",
        params![
            head.name,
            first.info.id as i64,
            old.schema.to_string(),
            old.renames
        ],
    )?;
    insert_checkpoint(&tx, first)?;
    advance_session(&tx, head)?;
    tx.execute(
        "UPDATE sessions SET schema = ?2, schema_version = ?3 WHERE name = ?1",
        params![head.name, new_schema.to_string(), schema_version],
    )?;
    crate::faults::point("mid_session_migrate");
    tx.commit()
}

/// Which checkpoints of a session are being deleted.
#[derive(Clone, Copy)]
pub enum Dropping {
    All,
    /// Those before this one, but the pinned ones (compaction).
    Before(u64),
    One(u64),
}

/// The code recorded by checkpoints about to be deleted: the repositories where
/// `refs/grove/checkpoints/<session>/<n>` may name it, and the refs that must stay
/// because an agent not yet finished was spawned on one (`base_ref`).
#[derive(Debug, Default)]
pub struct DroppedCode {
    pub session: String,
    /// Per repository, the checkpoints; `None`: all of the session's.
    pub repos: BTreeMap<PathBuf, Option<Vec<u64>>>,
    pub keep: HashSet<String>,
}

impl DroppedCode {
    pub fn is_empty(&self) -> bool {
        self.repos.is_empty()
    }
}

/// What [`DroppedCode`] the deletion of `which` checkpoints of `session` leaves to
/// clean up; read in the deleting transaction, before the rows go.
pub fn dropped_code(
    conn: &Connection,
    session: &str,
    which: Dropping,
) -> rusqlite::Result<DroppedCode> {
    let (filter, arg) = match which {
        Dropping::All => ("id >= ?2", 0),
        Dropping::Before(oldest) => (
            "id < ?2 AND id NOT IN (SELECT id FROM pins WHERE session = ?1)",
            oldest,
        ),
        Dropping::One(id) => ("id = ?2", id),
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id, code FROM checkpoints WHERE session = ?1 AND code IS NOT NULL AND {filter}"
    ))?;
    let rows = stmt.query_map(params![session, arg as i64], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
    })?;
    let mut dropped = DroppedCode {
        session: session.to_string(),
        ..Default::default()
    };
    for row in rows {
        let (id, code) = row?;
        // A code column this grove cannot read names no repository to clean.
        let Some(repo) = serde_json::from_str::<grove_proto::state::CodeRef>(&code)
            .ok()
            .and_then(|c| c.repo)
        else {
            continue;
        };
        let ids = dropped
            .repos
            .entry(repo)
            .or_insert_with(|| Some(Vec::new()));
        match (which, ids) {
            (Dropping::All, ids) => *ids = None,
            (_, Some(ids)) => ids.push(id),
            (_, None) => {}
        }
    }
    if !dropped.is_empty() {
        dropped.keep = live_bases(conn)?;
    }
    Ok(dropped)
}

/// The base refs of agents not started yet. A spawn resolves its base to a commit at
/// once (the record's `base_commit`, which diffs and collect use), but makes the
/// agent's branch from it only when the agent starts: until then the ref is all that
/// keeps the commit from `git gc`. Once started, the agent's branch holds it.
fn live_bases(conn: &Connection) -> rusqlite::Result<HashSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_extract(record, '$.base_ref') FROM agents
         WHERE status IN ('queued', 'preparing')",
    )?;
    let rows = stmt.query_map([], |r| r.get::<_, Option<String>>(0))?;
    let mut bases = HashSet::new();
    for base in rows {
        bases.extend(base?);
    }
    Ok(bases)
}

/// Every repository a checkpoint ref may be in: those the rows of checkpoints with
/// code name, and those of the agents on record.
pub fn code_repos(conn: &Connection) -> rusqlite::Result<Vec<PathBuf>> {
    let mut stmt = conn.prepare(
        "SELECT json_extract(record, '$.repo') FROM agents
         UNION SELECT json_extract(code, '$.repo') FROM checkpoints WHERE code IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| r.get::<_, Option<String>>(0))?;
    let mut repos = Vec::new();
    for repo in rows {
        repos.extend(repo?.map(PathBuf::from));
    }
    Ok(repos)
}

/// Of `refs` (`refs/grove/checkpoints/<session>/<n>`), those no checkpoint row names
/// and no agent not yet started is based on.
pub fn orphan_refs(conn: &Connection, refs: Vec<String>) -> rusqlite::Result<Vec<String>> {
    let keep = live_bases(conn)?;
    let mut stmt =
        conn.prepare_cached("SELECT 1 FROM checkpoints WHERE session = ?1 AND id = ?2")?;
    let mut orphans = Vec::new();
    for name in refs {
        let Some((session, id)) = name
            .strip_prefix(super::code::CHECKPOINT_REFS)
            .and_then(|rest| rest.rsplit_once('/'))
        else {
            continue;
        };
        // A name grove did not make is not grove's to delete.
        let Ok(id) = id.parse::<u64>() else {
            continue;
        };
        if !keep.contains(&name) && !stmt.exists(params![session, id as i64])? {
            orphans.push(name);
        }
    }
    Ok(orphans)
}

//! Agent rows.

use grove_proto::types::AgentRecord;
use rusqlite::{params, Connection};

/// An agent as the daemon stores it: the public record plus what only the daemon sees.
#[derive(Debug, Clone)]
pub struct AgentRow {
    pub record: AgentRecord,
    /// Secret the agent presents to prove who it is.
    pub token: String,
    /// Start time of the shim (clock ticks since boot, /proc/<pid>/stat field 22), so
    /// that a reused pid is never mistaken for the shim.
    pub pid_start: Option<u64>,
}

fn to_json(record: &AgentRecord) -> rusqlite::Result<String> {
    serde_json::to_string(record).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
}

pub fn upsert(conn: &Connection, row: &AgentRow) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO agents (id, status, created_at_ms, token, pid_start, record)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(id) DO UPDATE SET status = ?2, pid_start = ?5, record = ?6",
        params![
            row.record.id,
            row.record.status.as_str(),
            row.record.created_at_ms as i64,
            row.token,
            row.pid_start.map(|v| v as i64),
            to_json(&row.record)?,
        ],
    )?;
    Ok(())
}

pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM agents WHERE id = ?1", [id])?;
    Ok(())
}

pub fn load_all(conn: &Connection) -> rusqlite::Result<Vec<AgentRow>> {
    let mut stmt =
        conn.prepare("SELECT token, pid_start, record FROM agents ORDER BY created_at_ms, id")?;
    let rows = stmt.query_map([], |r| {
        let token: String = r.get(0)?;
        let pid_start: Option<i64> = r.get(1)?;
        let json: String = r.get(2)?;
        let record: AgentRecord = serde_json::from_str(&json).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into())
        })?;
        Ok(AgentRow {
            record,
            token,
            pid_start: pid_start.map(|v| v as u64),
        })
    })?;
    rows.collect()
}

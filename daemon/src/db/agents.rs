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

/// [`upsert`] for each row, in one transaction (one fsync).
pub fn upsert_all(conn: &mut Connection, rows: &[AgentRow]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    for row in rows {
        upsert(&tx, row)?;
    }
    tx.commit()
}

pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM agents WHERE id = ?1", [id])?;
    Ok(())
}

pub fn count(conn: &Connection) -> rusqlite::Result<usize> {
    conn.query_row("SELECT count(*) FROM agents", [], |r| r.get(0))
}

/// The statuses after which nothing more happens to an agent
/// ([`grove_proto::types::AgentStatus::is_final`]), as the `status` column has them,
/// and the others: both are named, so that each query can use the status index
/// (`NOT IN` read every row: 100,000 finished ones took 0.2 s to skip).
const FINISHED: &str = "('collected', 'lost', 'cancelled')";
const LIVE: &str = "('queued', 'preparing', 'running', 'paused', 'exited')";

/// Hands every live agent's row (not finished) to `keep`, in no order. The caller
/// builds its table as rows come: with 10,000 large rows, a list collected first and
/// then moved into the table showed in start-up time.
pub fn load_live(conn: &Connection, keep: impl FnMut(AgentRow)) -> rusqlite::Result<()> {
    let sql = format!("SELECT token, pid_start, record, id FROM agents WHERE status IN {LIVE}");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query([])?;
    read_rows(rows, keep)
}

/// Up to `limit` rows of finished agents, by id, after the id `after`.
pub fn load_finished(
    conn: &Connection,
    after: &str,
    limit: usize,
) -> rusqlite::Result<Vec<AgentRow>> {
    let sql = format!(
        "SELECT token, pid_start, record, id FROM agents
         WHERE status IN {FINISHED} AND id > ?1 ORDER BY id LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = Vec::with_capacity(limit);
    read_rows(stmt.query(params![after, limit as i64])?, |row| {
        rows.push(row)
    })?;
    Ok(rows)
}

fn read_rows(mut rows: rusqlite::Rows<'_>, mut keep: impl FnMut(AgentRow)) -> rusqlite::Result<()> {
    while let Some(r) = rows.next()? {
        let record: AgentRecord = serde_json::from_str(r.get_ref(2)?.as_str()?).map_err(|e| {
            let id = r.get_ref(3).ok().and_then(|id| id.as_str().ok());
            unreadable(id.unwrap_or("?"), &e)
        })?;
        keep(AgentRow {
            record,
            token: r.get(0)?,
            pid_start: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
        });
    }
    Ok(())
}

/// A record this grove cannot read is named with the way out. Left out, its worktree
/// would look like nobody's to the start-up scan: a live one stops the start, a
/// finished one every request that needs the finished agents (the scan's among them).
fn unreadable(id: &str, e: &serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        2,
        rusqlite::types::Type::Text,
        format!(
            "the record of agent {id} cannot be read ({e}); a newer grove may have written \
             it: run that version. Nothing was changed"
        )
        .into(),
    )
}

/// The environment of a queued agent, kept until it starts (values are secrets the user
/// handed over; they never reach a log or a record).
pub fn save_queued_env(
    conn: &Connection,
    id: &str,
    env: &[(String, String)],
) -> rusqlite::Result<()> {
    let json = serde_json::to_string(env)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    conn.execute(
        "INSERT OR REPLACE INTO queued_env (agent_id, env) VALUES (?1, ?2)",
        params![id, json],
    )?;
    Ok(())
}

/// The saved environment of a queued agent; `None` when none was saved.
pub fn load_queued_env(
    conn: &Connection,
    id: &str,
) -> rusqlite::Result<Option<Vec<(String, String)>>> {
    use rusqlite::OptionalExtension;
    let json: Option<String> = conn
        .query_row(
            "SELECT env FROM queued_env WHERE agent_id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    // Only a missing row means "not kept"; a failed read or a row this grove cannot
    // parse is an error, so that the agent is not cancelled for it.
    json.map(|j| {
        serde_json::from_str(&j).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
        })
    })
    .transpose()
}

/// Deletes a queued agent's environment so that no copy stays on disk: the row is
/// overwritten (`secure_delete`), and the WAL, which still holds the frames written
/// when it was saved, is checkpointed into the database and truncated to nothing.
pub fn drop_queued_env(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    if conn.execute("DELETE FROM queued_env WHERE agent_id = ?1", [id])? > 0 {
        wipe_wal(conn)?;
    }
    Ok(())
}

/// Copies every WAL frame into the database and empties the WAL file. With the one
/// connection the daemon has, nothing holds a reader that could keep frames alive.
pub fn wipe_wal(conn: &Connection) -> rusqlite::Result<()> {
    let (busy, _, _): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if busy != 0 {
        tracing::warn!("the WAL could not be emptied: a reader holds it; retried at the next drop");
    }
    Ok(())
}

pub fn delete_many(conn: &mut Connection, ids: &[String]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let mut envs = 0;
    for id in ids {
        tx.execute("DELETE FROM agents WHERE id = ?1", [id])?;
        envs += tx.execute("DELETE FROM queued_env WHERE agent_id = ?1", [id])?;
    }
    tx.commit()?;
    if envs > 0 {
        wipe_wal(conn)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use grove_proto::types::AgentStatus::*;

    #[test]
    fn every_status_is_either_live_or_finished_in_sql() {
        for status in [
            Queued, Preparing, Running, Paused, Exited, Collected, Lost, Cancelled,
        ] {
            let quoted = format!("'{}'", status.as_str());
            assert_eq!(
                super::FINISHED.contains(&quoted),
                status.is_final(),
                "{quoted}"
            );
            assert_eq!(
                super::LIVE.contains(&quoted),
                !status.is_final(),
                "{quoted}"
            );
        }
    }
}

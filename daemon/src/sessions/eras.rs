//! A session's schema eras. Each `grove session migrate` keeps the schema before it in
//! `session_schemas`, `until_id` being the migration's checkpoint: a checkpoint before
//! it was written under that schema. Reading, replaying and forking a checkpoint use
//! the schema of its era, never the newest with the old state (state-semantics.md, 32
//! and 33); a fork asked to `migrate` carries the state forward through every recorded
//! migration after it, as each migration did to the head.

use crate::error::Error;
use grove_state::{Schema, State};
use rusqlite::{params, Connection};

/// The schemas kept for checkpoints after `at`'s era began, oldest first: the first is
/// the one `at` was written under; none when `at` is in the current schema's era.
pub fn kept_after(conn: &Connection, session: &str, at: u64) -> rusqlite::Result<Vec<Schema>> {
    let mut stmt = conn.prepare_cached(
        "SELECT schema FROM session_schemas WHERE session = ?1 AND until_id > ?2
         ORDER BY until_id",
    )?;
    let rows = stmt.query_map(params![session, at as i64], |r| r.get::<_, String>(0))?;
    let mut schemas = Vec::new();
    for json in rows {
        let value: serde_json::Value = serde_json::from_str(&json?).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
        })?;
        let schema = Schema::from_json(&value)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        schemas.push(schema);
    }
    Ok(schemas)
}

/// The schema checkpoint `at` was written under, when it is not the current one.
pub fn schema_at(conn: &Connection, session: &str, at: u64) -> rusqlite::Result<Option<Schema>> {
    Ok(kept_after(conn, session, at)?.into_iter().next())
}

/// `state` of schema `old` as the migration to `new` left it: channels `new` adds get
/// their defaults, those it leaves out go, the others keep their values, which a
/// changed reducer must accept (the migration checked that of the head; an older
/// checkpoint's value may not fit).
pub fn carry(session: &str, old: &Schema, new: &Schema, mut state: State) -> Result<State, Error> {
    state.retain(|channel, _| new.channel(channel).is_some());
    for (channel, spec) in &new.channels {
        match old.channel(channel) {
            None => {
                state.insert(channel.clone(), spec.initial_value());
            }
            Some(before) if before.reducer != spec.reducer => {
                let held = state.get(channel).cloned().unwrap_or_default();
                if !held.is_null() && !spec.reducer.accepts_default(&held) {
                    return Err(Error::BadInput(format!(
                        "cannot carry channel `{channel}` of session `{session}` forward: it \
                         holds {} there, which reducer `{}` of a later migration cannot take \
                         (it needs {}); fork without --migrate to keep that checkpoint's \
                         schema; nothing was created",
                        grove_state::json_type(&held),
                        spec.reducer,
                        spec.reducer.expected_default()
                    )));
                }
            }
            Some(_) => {}
        }
    }
    Ok(state)
}

/// The schema and state a fork of checkpoint `at` (whose state is `state`) starts
/// with: `at`'s own era's, or with `migrate` the current schema and the state carried
/// through every migration since (`kept`: [`kept_after`]).
pub fn fork_point(
    session: &str,
    kept: Vec<Schema>,
    current: &Schema,
    state: State,
    migrate: bool,
) -> Result<(Schema, State), Error> {
    let Some(first) = kept.first().cloned() else {
        return Ok((current.clone(), state));
    };
    if !migrate {
        return Ok((first, state));
    }
    let mut state = state;
    let mut era = first;
    for next in kept.iter().skip(1).chain(std::iter::once(current)) {
        state = carry(session, &era, next, state)?;
        era = next.clone();
    }
    Ok((current.clone(), state))
}

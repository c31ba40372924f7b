//! A session's schema eras. Each `grove session migrate` keeps the schema before it in
//! `session_schemas`, `until_id` being the migration's checkpoint: a checkpoint before
//! it was written under that schema. Reading, replaying and forking a checkpoint use
//! the schema of its era, never the newest with the old state (state-semantics.md, 32
//! and 33); a fork asked to `migrate` carries the state forward through every recorded
//! migration after it, as each migration did to the head.

use crate::error::Error;
use grove_state::{Schema, State};
use rusqlite::{params, Connection};
use std::collections::BTreeMap;

/// A schema a migration left behind, and the channels that migration renamed
/// (old name to new).
#[derive(Debug, Clone)]
pub struct Era {
    pub schema: Schema,
    pub renames: BTreeMap<String, String>,
}

/// The eras after the one checkpoint `at` was written under began, oldest first: the
/// first is `at`'s own; none when `at` is in the current schema's era.
pub fn kept_after(conn: &Connection, session: &str, at: u64) -> rusqlite::Result<Vec<Era>> {
    let mut stmt = conn.prepare_cached(
        "SELECT schema, renames FROM session_schemas WHERE session = ?1 AND until_id > ?2
         ORDER BY until_id",
    )?;
    let rows = stmt.query_map(params![session, at as i64], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
    })?;
    let mut eras = Vec::new();
    for row in rows {
        let (schema, renames) = row?;
        let schema = Schema::from_json(&decode(&schema, 0)?)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        let renames = match renames {
            Some(json) => decode(&json, 1)?,
            None => BTreeMap::new(),
        };
        eras.push(Era { schema, renames });
    }
    Ok(eras)
}

fn decode<T: serde::de::DeserializeOwned>(json: &str, column: usize) -> rusqlite::Result<T> {
    serde_json::from_str(json).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, e.into())
    })
}

/// The schema checkpoint `at` was written under, when it is not the current one.
pub fn schema_at(conn: &Connection, session: &str, at: u64) -> rusqlite::Result<Option<Schema>> {
    Ok(kept_after(conn, session, at)?
        .into_iter()
        .next()
        .map(|era| era.schema))
}

/// What one migration makes of a state.
pub struct Step {
    pub state: State,
    pub added: Vec<String>,
    pub changed: Vec<String>,
}

/// A value the new reducer of its channel cannot take.
pub struct Unfit {
    pub channel: String,
    pub held: serde_json::Value,
    pub reducer: grove_state::Reducer,
}

/// `state` of schema `old` moved to `new`, as a migration does: renamed channels keep
/// their values under their new names, channels `new` adds get their defaults, those
/// it leaves out go, the others keep their values, which a changed reducer must take.
/// The caller checked that `renames` and what is left out fit the two schemas.
pub fn step(
    old: &Schema,
    new: &Schema,
    renames: &BTreeMap<String, String>,
    mut state: State,
) -> Result<Step, Unfit> {
    for (from, to) in renames {
        if let Some(value) = state.remove(from) {
            state.insert(to.clone(), value);
        }
    }
    state.retain(|channel, _| new.channel(channel).is_some());
    let mut step = Step {
        state,
        added: Vec::new(),
        changed: Vec::new(),
    };
    for (channel, spec) in &new.channels {
        let from = renames
            .iter()
            .find(|(_, to)| *to == channel)
            .map_or(channel.as_str(), |(from, _)| from.as_str());
        match old.channel(from) {
            None => {
                step.state.insert(channel.clone(), spec.initial_value());
                step.added.push(channel.clone());
            }
            Some(before) if before.reducer != spec.reducer => {
                let held = step.state.get(channel).cloned().unwrap_or_default();
                if !held.is_null() && !spec.reducer.accepts_default(&held) {
                    return Err(Unfit {
                        channel: channel.clone(),
                        held,
                        reducer: spec.reducer,
                    });
                }
                step.changed.push(channel.clone());
            }
            Some(_) => {}
        }
    }
    Ok(step)
}

/// The schema and state a fork of checkpoint `at` (whose state is `state`) starts
/// with: `at`'s own era's, or with `migrate` the current schema and the state carried
/// through every migration since (`kept`: [`kept_after`]).
pub fn fork_point(
    session: &str,
    kept: Vec<Era>,
    current: &Schema,
    mut state: State,
    migrate: bool,
) -> Result<(Schema, State), Error> {
    let Some(first) = kept.first() else {
        return Ok((current.clone(), state));
    };
    if !migrate {
        return Ok((first.schema.clone(), state));
    }
    let nexts = kept.iter().skip(1).map(|era| &era.schema);
    for (era, next) in kept.iter().zip(nexts.chain(std::iter::once(current))) {
        state = step(&era.schema, next, &era.renames, state)
            .map_err(|unfit| cannot_carry(session, &unfit))?
            .state;
    }
    Ok((current.clone(), state))
}

/// An older checkpoint may hold what the head no longer did when a migration ran.
fn cannot_carry(session: &str, unfit: &Unfit) -> Error {
    Error::BadInput(format!(
        "cannot carry channel `{}` of session `{session}` forward: it holds {} there, which \
         reducer `{}` of a later migration cannot take (it needs {}); fork without \
         --migrate to keep that checkpoint's schema; nothing was created",
        unfit.channel,
        grove_state::json_type(&unfit.held),
        unfit.reducer,
        unfit.reducer.expected_default()
    ))
}

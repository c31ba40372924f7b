//! A session's schema eras. Each `grove session migrate` keeps the schema before it in
//! `session_schemas`, `until_id` being the migration's checkpoint: a checkpoint before
//! it was written under that schema. Reading, replaying and forking a checkpoint use
//! the schema of its era, never the newest with the old state (state-semantics.md, 32
//! and 33); a fork or read asked to `migrate` carries the state forward through every
//! recorded migration after it, as each migration did to the head: the steps of the
//! next schema's chain, then the renames, adds and drops (36).

use crate::error::Error;
use grove_state::{chain, Schema, State};
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
    /// Channels the schema's chain converted or mapped, by the step that did.
    pub converted: BTreeMap<String, String>,
}

/// A value the new reducer of its channel cannot take.
pub struct Unfit {
    pub channel: String,
    pub held: serde_json::Value,
    pub reducer: grove_state::Reducer,
    /// The chain step whose conversion gave the value, when one did.
    pub by: Option<String>,
}

/// Why a state could not be carried from one schema to the next.
pub enum Uncarried {
    /// The new schema's chain does not go from the old revision to its own.
    Chain(String),
    /// A step of the chain failed (or its converter went past its limits).
    Step(super::convert::Failed),
    Unfit(Unfit),
}

impl Uncarried {
    /// In words, for a message that goes on to say what was left unchanged.
    pub fn describe(&self) -> String {
        match self {
            Uncarried::Chain(reason) => reason.clone(),
            Uncarried::Step(failed) => failed.to_string(),
            Uncarried::Unfit(unfit) => {
                let by = match &unfit.by {
                    Some(step) => format!("{step} converted channel `{}` to", unfit.channel),
                    None => format!("channel `{}` holds", unfit.channel),
                };
                format!(
                    "{by} {}, which reducer `{}` of the new schema cannot take (it needs {})",
                    grove_state::json_type(&unfit.held),
                    unfit.reducer,
                    unfit.reducer.expected_default()
                )
            }
        }
    }
}

/// `state` of schema `old` moved to `new`, as a migration does: first through the
/// steps of `new`'s chain from `old`'s revision to its own (state-semantics.md, 36),
/// then renamed channels keep their values under their new names, channels `new`
/// adds get their defaults, those it leaves out go, the others keep their values,
/// which a changed reducer (or a conversion) must fit. The caller checked that
/// `renames` and what is left out fit the two schemas.
pub async fn carry(
    old: &Schema,
    new: &Schema,
    renames: &BTreeMap<String, String>,
    state: State,
) -> Result<Step, Uncarried> {
    let steps = chain::steps_between(&new.migrations, old.revision, new.revision)
        .map_err(Uncarried::Chain)?;
    let carried = super::convert::carry(steps, state)
        .await
        .map_err(Uncarried::Step)?;
    let before = renamed_by(old, steps);
    let mut step =
        step(&before, new, renames, carried.state, &carried.converted).map_err(Uncarried::Unfit)?;
    for (channel, by) in carried.converted {
        let held = step.state.get(&channel).cloned().unwrap_or_default();
        if let Some(spec) = new.channel(&channel) {
            if !held.is_null() && !spec.reducer.accepts_default(&held) {
                return Err(Uncarried::Unfit(Unfit {
                    channel,
                    held,
                    reducer: spec.reducer,
                    by: Some(by),
                }));
            }
            step.converted.insert(channel, by);
        }
    }
    Ok(step)
}

/// `old` as `new`'s chain from its revision leaves it: the schema whose channels the
/// rest of a migration (its flags, adds and drops) sees.
pub fn before_chain(old: &Schema, new: &Schema) -> Result<Schema, Uncarried> {
    let steps = chain::steps_between(&new.migrations, old.revision, new.revision)
        .map_err(Uncarried::Chain)?;
    Ok(renamed_by(old, steps))
}

/// `old`'s channels as `steps` rename and drop them (their reducers stay).
fn renamed_by(old: &Schema, steps: &[chain::Migration]) -> Schema {
    let mut schema = old.clone();
    for step in steps {
        for (from, to) in &step.rename {
            if let Some(spec) = schema.channels.remove(from) {
                schema.channels.insert(to.clone(), spec);
            }
        }
        for channel in &step.drop {
            schema.channels.remove(channel);
        }
    }
    schema
}

fn step(
    old: &Schema,
    new: &Schema,
    renames: &BTreeMap<String, String>,
    mut state: State,
    converted: &BTreeMap<String, String>,
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
        converted: BTreeMap::new(),
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
                        by: converted.get(channel).cloned(),
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
pub async fn fork_point(
    session: &str,
    kept: Vec<Era>,
    current: &Schema,
    state: State,
    migrate: bool,
) -> Result<(Schema, State), Error> {
    let Some(first) = kept.first() else {
        return Ok((current.clone(), state));
    };
    if !migrate {
        return Ok((first.schema.clone(), state));
    }
    let state = through_eras(&kept, current, state)
        .await
        .map_err(|why| cannot_carry(session, &why))?;
    Ok((current.clone(), state))
}

/// A state of the era `kept[0]` carried through every migration since, to `current`.
pub async fn through_eras(
    kept: &[Era],
    current: &Schema,
    mut state: State,
) -> Result<State, Uncarried> {
    let nexts = kept.iter().skip(1).map(|era| &era.schema);
    for (era, next) in kept.iter().zip(nexts.chain(std::iter::once(current))) {
        state = carry(&era.schema, next, &era.renames, state).await?.state;
    }
    Ok(state)
}

/// An older checkpoint may hold what the head no longer did when a migration ran.
fn cannot_carry(session: &str, why: &Uncarried) -> Error {
    Error::BadInput(format!(
        "cannot carry the state of session `{session}` forward: {}; fork without \
         --migrate to keep that checkpoint's schema; nothing was created",
        why.describe()
    ))
}

/// The state right after checkpoint `at` carried to the newest schema, `current`
/// (`state get --at --migrate`): read on the database thread, carried off the state
/// task.
pub async fn migrated_state_at(
    db: &crate::db::Db,
    session: String,
    current: Schema,
    at: u64,
) -> Result<State, Error> {
    let name = session.clone();
    let (kept, state, current) = db
        .call(move |conn| {
            let kept = kept_after(conn, &name, at)?;
            let state = super::store::state_at(conn, &name, &current, at)?;
            Ok((kept, state, current))
        })
        .await?;
    if kept.is_empty() {
        return Ok(state);
    }
    through_eras(&kept, &current, state).await.map_err(|why| {
        Error::BadInput(format!(
            "cannot read checkpoint {at} of session `{session}` in the newest schema: {}; \
             read it without --migrate, in the schema it was written under",
            why.describe()
        ))
    })
}

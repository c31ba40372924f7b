//! Validating and applying one batch of writes, atomically.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::BatchError;
use crate::reducer::{
    inexact_integer, json_type, rounded_integer, same_value, ReduceError, Reducer,
};
use crate::schema::{ChannelSpec, SameKey, Schema};
use crate::State;

/// The only key of a write that replaces a channel's value outright.
pub const OVERWRITE_KEY: &str = "__overwrite__";

/// One write of a batch: a delta for the channel's reducer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    pub channel: String,
    pub value: Value,
    /// The checkpoint the writer last read; only replacing writes are checked against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
}

/// Per channel: the checkpoint that last changed it and who wrote it (kept by the store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastChange {
    pub checkpoint: u64,
    pub writer: String,
    /// The latest change by a writer other than `writer`: a later change of `writer`'s
    /// own must not hide it from `writer`'s stale writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_other: Option<(u64, String)>,
}

impl LastChange {
    /// The record once `writer` has changed the channel at `checkpoint`, after `previous`.
    pub fn after(previous: Option<&LastChange>, checkpoint: u64, writer: &str) -> LastChange {
        let by_other = match previous {
            Some(last) if last.writer == writer => last.by_other.clone(),
            Some(last) => Some((last.checkpoint, last.writer.clone())),
            None => None,
        };
        LastChange {
            checkpoint,
            writer: writer.to_owned(),
            by_other,
        }
    }

    /// The latest change by anyone but `writer`.
    fn latest_not_by(&self, writer: &str) -> Option<(u64, &str)> {
        if self.writer != writer {
            return Some((self.checkpoint, &self.writer));
        }
        self.by_other
            .as_ref()
            .map(|(checkpoint, other)| (*checkpoint, other.as_str()))
    }
}

impl Write {
    /// A write without `base`.
    pub fn new(channel: impl Into<String>, value: Value) -> Write {
        Write {
            channel: channel.into(),
            value,
            base: None,
        }
    }

    /// `v` if the value is `{"__overwrite__": v}` (that key alone).
    pub fn overwrite_value(&self) -> Option<&Value> {
        match &self.value {
            Value::Object(object) if object.len() == 1 => object.get(OVERWRITE_KEY),
            _ => None,
        }
    }
}

/// What the stale-write check compares against; absent when replaying.
struct StaleCheck<'a> {
    writer: &'a str,
    last_changes: &'a HashMap<String, LastChange>,
}

/// Applies one batch by `writer` to `state`, in order, all or nothing.
/// On error the caller keeps `state`: nothing of the batch counts.
pub fn apply_batch(
    schema: &Schema,
    state: &State,
    writes: &[Write],
    writer: &str,
    last_changes: &HashMap<String, LastChange>,
) -> Result<State, BatchError> {
    // Only new writes: a stored batch was accepted as it is and must replay the same.
    for write in writes {
        if let Some(value) = inexact_integer(&write.value) {
            return Err(BatchError::InexactInteger {
                channel: write.channel.clone(),
                value,
            });
        }
    }
    apply(
        schema,
        state,
        writes,
        Some(&StaleCheck {
            writer,
            last_changes,
        }),
    )
}

/// Same as [`apply_batch`] but skips the stale-write check (used when
/// replaying a stored log, whose batches were accepted when they arrived).
pub fn replay_batch(schema: &Schema, state: &State, writes: &[Write]) -> Result<State, BatchError> {
    apply(schema, state, writes, None)
}

/// The channels a batch writes, sorted and deduplicated.
pub fn channels_written(writes: &[Write]) -> Vec<String> {
    let names: BTreeSet<&str> = writes.iter().map(|write| write.channel.as_str()).collect();
    names.into_iter().map(str::to_owned).collect()
}

fn apply(
    schema: &Schema,
    state: &State,
    writes: &[Write],
    stale: Option<&StaleCheck<'_>>,
) -> Result<State, BatchError> {
    if writes.is_empty() {
        return Err(BatchError::EmptyBatch);
    }
    // Work on a copy so that a refused write leaves the caller's state whole.
    let mut next = state.clone();
    let mut replaced: HashSet<&str> = HashSet::new();
    for write in writes {
        let spec = declared(schema, &write.channel)?;
        let replacement = replacement(spec, write);
        if replacement.is_some() {
            if !replaced.insert(&write.channel) {
                return Err(BatchError::DoubleOverwrite {
                    channel: write.channel.clone(),
                });
            }
            if let Some(check) = stale {
                check.check(write)?;
            }
        }
        let slot = next
            .entry(write.channel.clone())
            .or_insert_with(|| spec.initial_value());
        // Only new writes: a stored batch was accepted as it is and must replay the same.
        if stale.is_some() && replacement.is_none() {
            if spec.reducer == Reducer::Add {
                check_exact_sum(&write.channel, slot, &write.value)?;
            }
            if spec.same_key == SameKey::Refuse {
                check_same_keys(&write.channel, slot, &write.value)?;
            }
        }
        *slot = match (
            replacement,
            spec.same_key,
            &write.value,
            std::mem::take(slot),
        ) {
            (Some(value), ..) => value.clone(),
            (None, SameKey::Merge, Value::Object(write), Value::Object(mut held)) => {
                merge_deep(&mut held, write);
                Value::Object(held)
            }
            (None, _, _, held) => reduce(spec.reducer, &write.channel, held, &write.value)?,
        };
    }
    Ok(next)
}

/// Behaviour 10: an `add` that would round an integer is refused, not rounded.
fn check_exact_sum(channel: &str, held: &Value, write: &Value) -> Result<(), BatchError> {
    let (Value::Number(held), Value::Number(write)) = (held, write) else {
        return Ok(()); // a type mismatch is the reducer's to refuse
    };
    match rounded_integer(held, write) {
        Some(integer) => Err(BatchError::InexactSum {
            channel: channel.to_owned(),
            held: held.clone(),
            write: write.clone(),
            integer,
        }),
        None => Ok(()),
    }
}

/// Behaviour 39: `same_key = "merge"`: where both sides hold an object under a key, the
/// two are merged the same way; anything else is replaced by the write.
fn merge_deep(held: &mut serde_json::Map<String, Value>, write: &serde_json::Map<String, Value>) {
    for (key, written) in write {
        match (held.get_mut(key), written) {
            (Some(Value::Object(inner)), Value::Object(written)) => merge_deep(inner, written),
            _ => {
                held.insert(key.clone(), written.clone());
            }
        }
    }
}

/// Behaviour 31: a key held already takes no other value.
fn check_same_keys(channel: &str, held: &Value, write: &Value) -> Result<(), BatchError> {
    let (Value::Object(held), Value::Object(write)) = (held, write) else {
        return Ok(()); // a type mismatch is the reducer's to refuse
    };
    for (key, written) in write {
        match held.get(key) {
            Some(value) if !same_value(value, written) => {
                return Err(BatchError::KeyConflict {
                    channel: channel.to_owned(),
                    key: key.clone(),
                    held: value.clone(),
                    written: written.clone(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

fn declared<'s>(schema: &'s Schema, channel: &str) -> Result<&'s ChannelSpec, BatchError> {
    schema
        .channel(channel)
        .ok_or_else(|| BatchError::UndeclaredChannel {
            channel: channel.to_owned(),
            declared: schema.channel_names(),
        })
}

/// The value a write replaces its channel with, if it is a replacing write:
/// any write to an `overwrite` channel, or `{"__overwrite__": v}` to any channel.
fn replacement<'w>(spec: &ChannelSpec, write: &'w Write) -> Option<&'w Value> {
    match (write.overwrite_value(), spec.reducer) {
        (Some(value), _) => Some(value),
        (None, Reducer::Overwrite) => Some(&write.value),
        (None, _) => None,
    }
}

fn reduce(
    reducer: Reducer,
    channel: &str,
    current: Value,
    write: &Value,
) -> Result<Value, BatchError> {
    reducer
        .combine(current, write)
        .map_err(|error| match error {
            ReduceError::WrongType => BatchError::WrongType {
                channel: channel.to_owned(),
                reducer,
                expected: reducer.expected_write(),
                received: json_type(write),
            },
            ReduceError::StoredType(held) => BatchError::StoredTypeMismatch {
                channel: channel.to_owned(),
                reducer,
                held,
            },
            ReduceError::OutOfRange => BatchError::NumberOutOfRange {
                channel: channel.to_owned(),
            },
        })
}

impl StaleCheck<'_> {
    /// Behaviour 16: a replacing write based on checkpoint `base` conflicts
    /// when another writer changed the channel after `base`. Also applied to
    /// `{"__overwrite__": v}` on other reducers: it loses updates the same way.
    fn check(&self, write: &Write) -> Result<(), BatchError> {
        let (Some(base), Some(last)) = (write.base, self.last_changes.get(&write.channel)) else {
            return Ok(());
        };
        match last.latest_not_by(self.writer) {
            Some((changed_at, changed_by)) if changed_at > base => Err(BatchError::Conflict {
                channel: write.channel.clone(),
                base,
                changed_at,
                changed_by: changed_by.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

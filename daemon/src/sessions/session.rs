//! One session in memory: its schema, its current state and what the conflict check
//! needs. The database holds the history; this holds the head.

use super::store::SessionRow;
use crate::error::Error;
use grove_proto::state::SessionInfo;
use grove_state::{LastChange, Schema, State, SCHEMA_VERSION};
use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;

#[derive(Debug, Clone)]
pub struct Session {
    pub name: String,
    pub schema: Schema,
    pub schema_version: u32,
    pub created_at_ms: u64,
    pub forked_from: Option<String>,
    pub forked_at: Option<u64>,
    pub head: u64,
    pub oldest: u64,
    pub last_at_ms: Option<u64>,
    pub last_changes: HashMap<String, LastChange>,
    pub current: State,
    /// Per channel, the bytes its entry takes in the state's JSON (`"key":value,`), so
    /// that a write measures only the channels it changed.
    pub channel_bytes: HashMap<String, u64>,
    /// Checkpoints kept readable through compaction.
    pub pins: BTreeSet<u64>,
    /// Whether `current` and `channel_bytes` hold the head; a suspended session's head
    /// is read again on its next use.
    pub loaded: bool,
    /// The state's size as last measured, for a session not loaded.
    pub stored_bytes: u64,
    /// The last read or write (or its creation).
    pub last_used_ms: u64,
    pub lifecycle: Lifecycle,
    /// Set when the stored data cannot be read by this daemon (a newer schema version):
    /// every operation is refused with this message rather than misread.
    pub unreadable: Option<String>,
    /// An agent's automatic session its agent has not written yet: stored (so that it
    /// outlives a restart with its schema) but listed nowhere and left alone by the GC
    /// pass; it goes with its agent's record.
    pub reserved: bool,
}

impl Session {
    pub fn new(name: &str, schema: Schema, now_ms: u64) -> Session {
        Session {
            name: name.to_string(),
            current: schema.initial_state(),
            schema_version: schema.version,
            schema,
            created_at_ms: now_ms,
            forked_from: None,
            forked_at: None,
            head: 0,
            oldest: 0,
            last_at_ms: None,
            last_changes: HashMap::new(),
            channel_bytes: HashMap::new(),
            pins: BTreeSet::new(),
            loaded: true,
            stored_bytes: 0,
            last_used_ms: now_ms,
            lifecycle: Lifecycle::Active,
            unreadable: None,
            reserved: false,
        }
        .measured()
    }

    /// Measures every channel of `current` again; the head is loaded from here on.
    pub fn measured(mut self) -> Session {
        self.remeasure();
        self
    }

    pub fn remeasure(&mut self) {
        self.loaded = true;
        self.channel_bytes = self
            .current
            .iter()
            .map(|(key, value)| (key.clone(), entry_bytes(key, value)))
            .collect();
    }

    /// Bytes of the state as JSON.
    pub fn state_bytes(&self) -> u64 {
        if !self.loaded {
            return self.stored_bytes;
        }
        state_bytes(self.channel_bytes.values().copied())
    }

    /// Drops the head from memory (it stays stored).
    pub fn unload(&mut self) {
        if self.loaded {
            self.stored_bytes = self.state_bytes();
        }
        self.current = State::new();
        self.channel_bytes = HashMap::new();
        self.loaded = false;
    }

    /// Rebuilds a session from its row; `current` is filled in by the caller.
    pub fn from_row(row: SessionRow) -> Session {
        let parsed = Schema::from_json(&row.schema).map_err(|e| e.to_string());
        Session::from_parsed(row, parsed)
    }

    /// [`Session::from_row`] with the row's schema already parsed (`row.schema` is not
    /// read): a schema that could not be is kept with why, and the session refuses
    /// every operation rather than misread its data.
    pub fn from_parsed(row: SessionRow, parsed: Result<Schema, String>) -> Session {
        let unreadable = if row.schema_version > SCHEMA_VERSION {
            Some(format!(
                "session `{}` was stored with state schema version {}, newer than this grove \
                 understands ({SCHEMA_VERSION}); upgrade grove to read it",
                row.name, row.schema_version
            ))
        } else {
            parsed.as_ref().err().map(|e| {
                format!(
                    "session `{}` has a stored schema this grove cannot read ({e}); \
                     its data is kept as it is",
                    row.name
                )
            })
        };
        let parsed = parsed.ok().filter(|_| unreadable.is_none());
        let schema = parsed.unwrap_or(Schema::empty());
        Session {
            name: row.name,
            // A written head is read on first use; an unwritten one is the initial state.
            current: if row.head == 0 {
                schema.initial_state()
            } else {
                State::new()
            },
            schema,
            schema_version: row.schema_version,
            created_at_ms: row.created_at_ms,
            forked_from: row.forked_from,
            forked_at: row.forked_at,
            head: row.head,
            oldest: row.oldest,
            last_at_ms: row.last_at_ms,
            last_changes: row.last_changes,
            channel_bytes: HashMap::new(),
            pins: BTreeSet::new(),
            loaded: false,
            stored_bytes: row.state_bytes,
            last_used_ms: row
                .last_used_ms
                .or(row.last_at_ms)
                .unwrap_or(row.created_at_ms),
            lifecycle: Lifecycle::parse(&row.lifecycle),
            unreadable,
            reserved: row.reserved,
        }
    }

    pub fn row(&self) -> SessionRow {
        SessionRow {
            name: self.name.clone(),
            schema: self.schema.to_json(),
            schema_version: self.schema_version,
            created_at_ms: self.created_at_ms,
            forked_from: self.forked_from.clone(),
            forked_at: self.forked_at,
            head: self.head,
            oldest: self.oldest,
            last_at_ms: self.last_at_ms,
            last_changes: self.last_changes.clone(),
            last_used_ms: Some(self.last_used_ms),
            lifecycle: self.lifecycle.name().to_string(),
            state_bytes: self.state_bytes(),
            reserved: self.reserved,
        }
    }

    pub fn check_readable(&self) -> Result<(), Error> {
        match &self.unreadable {
            Some(why) => Err(crate::metrics::schema_refusal(Error::InvalidState(
                why.clone(),
            ))),
            None => Ok(()),
        }
    }

    /// Checks that checkpoint `at` can be read.
    pub fn check_checkpoint(&self, at: u64) -> Result<(), Error> {
        if at > self.head {
            return Err(Error::NotFound(format!(
                "session `{}` has no checkpoint {at}; the newest is {}",
                self.name, self.head
            )));
        }
        if at < self.oldest && !(at == 0 && self.oldest <= 1) && !self.pins.contains(&at) {
            return Err(Error::NotFound(format!(
                "checkpoint {at} of session `{}` was compacted away; the oldest readable is {}",
                self.name, self.oldest
            )));
        }
        Ok(())
    }

    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            name: self.name.clone(),
            schema: self.schema.to_json(),
            channels: self.schema.channels.len() as u64,
            checkpoints: if self.head == 0 {
                0
            } else {
                self.head - self.oldest.max(1) + 1
            },
            head: self.head,
            oldest: self.oldest,
            last_checkpoint_at_ms: self.last_at_ms,
            state_bytes: self.state_bytes(),
            lifecycle: self.lifecycle.name().to_string(),
            last_used_ms: self.last_used_ms,
            in_memory: self.loaded,
            agents: Vec::new(),
            forked_from: self.forked_from.clone(),
            forked_at: self.forked_at,
        }
    }
}

/// Where a session is in its life; see `SessionLifecycle` for when it moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Active,
    Idle,
    Suspended,
    Archived,
}

impl Lifecycle {
    pub fn name(self) -> &'static str {
        match self {
            Lifecycle::Active => "active",
            Lifecycle::Idle => "idle",
            Lifecycle::Suspended => "suspended",
            Lifecycle::Archived => "archived",
        }
    }

    /// A stored name; anything unknown counts as suspended (read again on use).
    pub fn parse(name: &str) -> Lifecycle {
        match name {
            "active" => Lifecycle::Active,
            "idle" => Lifecycle::Idle,
            "archived" => Lifecycle::Archived,
            _ => Lifecycle::Suspended,
        }
    }
}

/// Counts what serde writes, without keeping it.
#[derive(Default)]
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a value as JSON.
pub fn json_bytes<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    let mut counter = Counter::default();
    // Writing to a counter fails only for a value that cannot be JSON at all.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Bytes of one channel's entry in the state's JSON, its comma included.
pub fn entry_bytes(key: &str, value: &serde_json::Value) -> u64 {
    let mut counter = Counter::default();
    let _ = serde_json::to_writer(&mut counter, key);
    let _ = serde_json::to_writer(&mut counter, value);
    let _ = counter.write_all(b":,");
    counter.0
}

/// Bytes of the state's JSON, given its entries: `{`, the entries, `}` in place of the
/// last comma.
pub fn state_bytes(entries: impl Iterator<Item = u64>) -> u64 {
    (1 + entries.sum::<u64>()).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn measured_bytes_are_the_json_length() {
        for state in [
            json!({}),
            json!({"a": 1}),
            json!({"a": [1, "x"], "b\"": {"k": null}}),
        ] {
            let serde_json::Value::Object(map) = state.clone() else {
                unreachable!()
            };
            let entries = map.iter().map(|(k, v)| entry_bytes(k, v));
            assert_eq!(state_bytes(entries), state.to_string().len() as u64);
        }
    }
}

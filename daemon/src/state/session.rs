//! One session in memory: its schema, its current state and what the conflict check
//! needs. The database holds the history; this holds the head.

use super::store::SessionRow;
use crate::error::Error;
use grove_proto::state::SessionInfo;
use grove_state::{LastChange, Schema, State, SCHEMA_VERSION};
use std::collections::HashMap;

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
    /// Set when the stored data cannot be read by this daemon (a newer schema version):
    /// every operation is refused with this message rather than misread.
    pub unreadable: Option<String>,
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
            unreadable: None,
        }
    }

    /// Rebuilds a session from its row; `current` is filled in by the caller.
    pub fn from_row(row: SessionRow) -> Session {
        let mut unreadable = (row.schema_version > SCHEMA_VERSION).then(|| {
            format!(
                "session `{}` was stored with state schema version {}, newer than this grove \
                 understands ({SCHEMA_VERSION}); upgrade grove to read it",
                row.name, row.schema_version
            )
        });
        let parsed = match &unreadable {
            Some(_) => None,
            None => Schema::from_json(&row.schema)
                .map_err(|e| {
                    // Never read or write the state through a schema it was not made with.
                    unreadable = Some(format!(
                        "session `{}` has a stored schema this grove cannot read ({e}); \
                         its data is kept as it is",
                        row.name
                    ));
                })
                .ok(),
        };
        let schema = parsed.unwrap_or(Schema {
            version: SCHEMA_VERSION,
            channels: Default::default(),
        });
        Session {
            name: row.name,
            current: schema.initial_state(),
            schema,
            schema_version: row.schema_version,
            created_at_ms: row.created_at_ms,
            forked_from: row.forked_from,
            forked_at: row.forked_at,
            head: row.head,
            oldest: row.oldest,
            last_at_ms: row.last_at_ms,
            last_changes: row.last_changes,
            unreadable,
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
        if at < self.oldest && !(at == 0 && self.oldest <= 1) {
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
            state_bytes: serde_json::to_string(&self.current).map_or(0, |s| s.len() as u64),
            agents: Vec::new(),
            forked_from: self.forked_from.clone(),
            forked_at: self.forked_at,
        }
    }
}

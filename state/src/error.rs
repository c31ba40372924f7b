//! Errors of schema parsing and batch application.
//!
//! Every message names what the user has to fix: the file position for a
//! schema, the channel (and reducer) for a batch.

use std::fmt;

use crate::reducer::{a_type, Reducer};
use serde_json::Value;

/// A schema that cannot be used, with where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    /// The origin given to the parser (usually a file name).
    pub file: String,
    /// 1-based line, when the position is known.
    pub line: Option<usize>,
    /// 1-based column (in characters), when the position is known.
    pub column: Option<usize>,
    /// What is wrong, in words.
    pub reason: String,
}

impl SchemaError {
    pub(crate) fn new(file: &str, reason: impl Into<String>) -> Self {
        SchemaError {
            file: file.to_owned(),
            line: None,
            column: None,
            reason: reason.into(),
        }
    }

    pub(crate) fn at(
        file: &str,
        position: Option<(usize, usize)>,
        reason: impl Into<String>,
    ) -> Self {
        let mut error = SchemaError::new(file, reason);
        if let Some((line, column)) = position {
            error.line = Some(line);
            error.column = Some(column);
        }
        error
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                write!(f, "{}:{line}:{column}: {}", self.file, self.reason)
            }
            (Some(line), None) => write!(f, "{}:{line}: {}", self.file, self.reason),
            _ => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// Why a batch was refused. A refused batch changes nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchError {
    #[error(
        "a batch must hold at least one write (to record a checkpoint without changing anything, \
         write an empty array to an `append` channel)"
    )]
    EmptyBatch,

    #[error("channel `{channel}` is not declared in the session's schema (declared: {})", list_or_none(.declared))]
    UndeclaredChannel {
        channel: String,
        /// The channels the schema declares, sorted.
        declared: Vec<String>,
    },

    #[error("channel `{channel}` (reducer `{reducer}`) expects {expected}, but the write is {}", a_type(.received))]
    WrongType {
        channel: String,
        reducer: Reducer,
        expected: &'static str,
        /// JSON type name of the written value: null, boolean, number, string, array, object.
        received: &'static str,
    },

    #[error(
        "channel `{channel}` (reducer `{reducer}`) holds {}, which its reducer cannot combine with; \
         replace it first with {{\"__overwrite__\": value}}", a_type(.held)
    )]
    StoredTypeMismatch {
        channel: String,
        reducer: Reducer,
        /// JSON type name of the value the channel currently holds.
        held: &'static str,
    },

    #[error("channel `{channel}`: the sum does not fit in a JSON number (integer overflow or infinite float)")]
    NumberOutOfRange { channel: String },

    #[error(
        "channel `{channel}`: the write holds the whole number {value:e}, outside the range \
         integers are exact in (-2^63 to 2^64-1), so it would be rounded; write it as a string, \
         or as a float with a fraction if rounding is fine"
    )]
    InexactInteger { channel: String, value: f64 },

    #[error(
        "channel `{channel}` (reducer `add`): adding {write} to {held} mixes a float with the \
         integer {integer}, beyond +/-2^53 where a float holds every integer, so the sum would be \
         rounded; nothing was applied. Write only integers to this channel, or replace its value \
         first with {{\"__overwrite__\": value}}"
    )]
    InexactSum {
        channel: String,
        held: serde_json::Number,
        write: serde_json::Number,
        integer: i128,
    },

    #[error(
        "conflict on channel `{channel}` (merge, same_key = \"refuse\"): key `{key}` holds \
         {held}, and the write gives it {written}; nothing was applied. Write another key, or \
         replace the whole object with {{\"__overwrite__\": value}}"
    )]
    KeyConflict {
        channel: String,
        key: String,
        held: Value,
        written: Value,
    },

    #[error(
        "channel `{channel}` is replaced twice in one batch (two writes to an `overwrite` channel, \
         or two {{\"__overwrite__\": value}} writes); send them in separate batches"
    )]
    DoubleOverwrite { channel: String },

    #[error(
        "conflict on channel `{channel}`: the write is based on checkpoint {base}, but `{changed_by}` \
         changed the channel at checkpoint {changed_at}; read the state again and retry"
    )]
    Conflict {
        channel: String,
        base: u64,
        changed_at: u64,
        changed_by: String,
    },
}

impl BatchError {
    /// The channel the error is about, if any.
    pub fn channel(&self) -> Option<&str> {
        match self {
            BatchError::EmptyBatch => None,
            BatchError::UndeclaredChannel { channel, .. }
            | BatchError::WrongType { channel, .. }
            | BatchError::StoredTypeMismatch { channel, .. }
            | BatchError::NumberOutOfRange { channel }
            | BatchError::InexactInteger { channel, .. }
            | BatchError::InexactSum { channel, .. }
            | BatchError::KeyConflict { channel, .. }
            | BatchError::DoubleOverwrite { channel }
            | BatchError::Conflict { channel, .. } => Some(channel),
        }
    }
}

/// A stored schema version newer than this build understands (behaviour 22):
/// such a session must be refused, never read with the wrong rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the session's state schema has version {found}, newer than this grove understands \
     (up to {supported}); upgrade grove to read it"
)]
pub struct UnsupportedVersion {
    pub found: u32,
    pub supported: u32,
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

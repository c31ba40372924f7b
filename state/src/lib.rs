//! grove's shared state: the schema of a session's channels, the reducers
//! that combine writes, and the atomic application of one batch of writes.
//!
//! Pure logic without I/O: the daemon orders, stores and acknowledges
//! batches; this crate says what a batch does to the state, or why it is
//! refused. The exact rules are in `docs/state-semantics.md`.

mod batch;
pub mod chain;
mod error;
mod reducer;
mod schema;

pub use batch::{apply_batch, channels_written, replay_batch, LastChange, Write, OVERWRITE_KEY};
pub use error::{BatchError, SchemaError, UnsupportedVersion};
pub use reducer::{
    inexact_integer, json_type, known_reducers, same_value, Reducer, UnknownReducer,
};
pub use schema::{ChannelSpec, SameKey, Schema, JSON_ORIGIN, SCHEMA_VERSION};

/// A session's state: one JSON value per channel.
pub type State = serde_json::Map<String, serde_json::Value>;

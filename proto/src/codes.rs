//! Stable JSON-RPC error codes. The standard ones come from the JSON-RPC 2.0 spec;
//! grove's own live in -32001..=-32099 and never change meaning once published.

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// No agent matches the id or prefix given.
pub const NOT_FOUND: i64 = -32001;
/// An id prefix matches more than one agent.
pub const AMBIGUOUS_ID: i64 = -32002;
/// The request is well formed but its content is unusable (not a git repo, bad ref...).
pub const BAD_INPUT: i64 = -32003;
/// The client and the daemon speak different protocol versions.
pub const PROTOCOL_MISMATCH: i64 = -32004;
/// A method was called before `hello`.
pub const HELLO_REQUIRED: i64 = -32005;
/// A line exceeded [`crate::MAX_LINE_BYTES`].
pub const LINE_TOO_LONG: i64 = -32006;
/// A git operation failed for a reason outside the request (disk, permissions, locks).
pub const GIT_FAILED: i64 = -32007;
/// The daemon refuses: authority, capacity or disk pressure.
pub const REFUSED: i64 = -32008;
/// The daemon is shutting down and takes no new work.
pub const SHUTTING_DOWN: i64 = -32009;
/// The agent is not in a state that allows the operation (e.g. kill of a finished agent).
pub const INVALID_STATE: i64 = -32010;
/// A state write based on a checkpoint older than another writer's change.
pub const CONFLICT: i64 = -32011;
/// A connection cap was reached before the daemon read the request, so nothing of it
/// ran: connect again after a pause (the clients back off and retry on their own).
pub const BUSY: i64 = -32012;
/// What a request was to act on changed since the client showed it to the user (a
/// `.grove.toml` to approve): nothing was done; show it again.
pub const CHANGED: i64 = -32013;
/// An agent's tree (the agent the user spawned and all its descendants) holds all the
/// connections it may (`tree_max_connections`): refused at `hello`, not retried, since
/// only the tree closing some frees one.
pub const TREE_BUSY: i64 = -32014;
/// A write by an agent would take its tree's share of grove.db past `tree_max_db`:
/// nothing of it was stored. Not retried: only the tree's data going frees room.
pub const TREE_DB_FULL: i64 = -32015;

//! grove's wire protocol: JSON-RPC 2.0, one JSON object per line, over a local socket.
//!
//! This crate is the single source of the wire types. It holds no daemon code, so that
//! any client (the `grove` command, a parent agent, a test) can depend on it cheaply.

pub mod agent_log;
pub mod b64;
pub mod client;
pub mod codes;
pub mod console;
pub mod env;
pub mod framing;
pub mod git;
pub mod jsonrpc;
pub mod methods;
pub mod paths;
pub mod retry;
pub mod shim;
pub mod state;
pub mod types;

/// The protocol version exchanged in `hello`. Bump it on any incompatible wire change;
/// it is deliberately independent of the crate version.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest line (one JSON-RPC message) either side accepts, newline excluded.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Most bytes of input piped into `grove spawn` (they travel base64-encoded in the spawn
/// request, which must fit in one line with the caller's environment).
pub const MAX_SPAWN_STDIN_BYTES: usize = 512 << 10;

pub use client::{AsyncClient, Client, ClientError, Envelope};
pub use jsonrpc::{Notification, Request, Response, RpcError};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

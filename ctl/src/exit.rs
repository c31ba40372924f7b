//! Exit codes, documented in the README:
//! 0 ok; 1 an agent failed (wait) or an unexpected error; 2 usage or bad input;
//! 3 the daemon is unreachable or speaks another protocol; 4 refused.

use grove_proto::{codes, ClientError};
use std::process::ExitCode;

pub const AGENT_FAILED: u8 = 1;
pub const USAGE: u8 = 2;
pub const UNREACHABLE: u8 = 3;
pub const REFUSED: u8 = 4;

pub fn code_for(error: &anyhow::Error) -> ExitCode {
    let code = match error.downcast_ref::<ClientError>() {
        Some(ClientError::Unreachable { .. }) => UNREACHABLE,
        Some(e) if e.is_protocol_mismatch() => UNREACHABLE,
        Some(ClientError::Rpc(rpc)) => match rpc.code {
            codes::BAD_INPUT
            | codes::NOT_FOUND
            | codes::AMBIGUOUS_ID
            | codes::INVALID_PARAMS
            | codes::INVALID_STATE => USAGE,
            codes::REFUSED => REFUSED,
            _ => AGENT_FAILED,
        },
        Some(_) => UNREACHABLE,
        None => match error.downcast_ref::<UsageError>() {
            Some(_) => USAGE,
            None => AGENT_FAILED,
        },
    };
    ExitCode::from(code)
}

/// A mistake in how grove was called, found before talking to the daemon.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

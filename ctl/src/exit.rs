//! Exit codes, documented in the README and in `grove --help` (`cli::EXIT_CODES`):
//! 0 ok; 1 an agent failed (wait) or an unexpected error; 2 usage or bad input;
//! 3 the daemon is unreachable or speaks another protocol; 4 refused; 5 the daemon's
//! database is damaged (`grove daemon recover`); 6 no answer in time (`grove ask`).
//! clap's own usage errors exit 2 as well.

use grove_proto::{codes, ClientError};
use std::process::ExitCode;

pub const AGENT_FAILED: u8 = 1;
pub const USAGE: u8 = 2;
pub const UNREACHABLE: u8 = 3;
pub const REFUSED: u8 = 4;
pub const DAMAGED: u8 = 5;
/// `grove ask --timeout` passed without an answer.
pub const NO_ANSWER: u8 = 6;

pub fn code_for(error: &anyhow::Error) -> ExitCode {
    ExitCode::from(number_for(error))
}

/// An error as `--json` callers read it on stderr: `{"error": {"code", "message"}}`,
/// `code` being the exit code (and `rpc_code` the daemon's JSON-RPC code, if it said no).
pub fn json_error(error: &anyhow::Error) -> serde_json::Value {
    let mut body = serde_json::json!({
        "code": number_for(error),
        "message": format!("{error:#}"),
    });
    if let Some(ClientError::Rpc(rpc)) = error.downcast_ref::<ClientError>() {
        body["rpc_code"] = rpc.code.into();
    }
    serde_json::json!({ "error": body })
}

fn number_for(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<ClientError>() {
        Some(ClientError::Unreachable { .. }) => UNREACHABLE,
        Some(e) if e.is_protocol_mismatch() => UNREACHABLE,
        Some(ClientError::Rpc(rpc)) => rpc_code(rpc.code),
        Some(ClientError::WontStart(_)) => DAMAGED,
        Some(_) => UNREACHABLE,
        None if is_damage(error) => DAMAGED,
        None if error.downcast_ref::<UsageError>().is_some() => USAGE,
        None if error.downcast_ref::<Refused>().is_some() => REFUSED,
        None if error
            .downcast_ref::<grove_proto::paths::PathError>()
            .is_some() =>
        {
            USAGE
        }
        None if error
            .downcast_ref::<grove_daemon::config::ConfigError>()
            .is_some() =>
        {
            USAGE
        }
        None => AGENT_FAILED,
    }
}

/// The daemon refused to start on a damaged database or log.
fn is_damage(error: &anyhow::Error) -> bool {
    use grove_daemon::DbError;
    error.chain().any(|cause| {
        matches!(cause.downcast_ref::<DbError>(), Some(DbError::Damaged(_)))
            || matches!(
                cause.downcast_ref::<grove_daemon::Error>(),
                Some(grove_daemon::Error::Db(DbError::Damaged(_)))
            )
    })
}

/// What a JSON-RPC error from the daemon means for our exit code.
fn rpc_code(code: i64) -> u8 {
    match code {
        codes::BAD_INPUT
        | codes::NOT_FOUND
        | codes::AMBIGUOUS_ID
        | codes::INVALID_PARAMS
        | codes::INVALID_STATE
        | codes::LINE_TOO_LONG => USAGE,
        codes::REFUSED
        | codes::CONFLICT
        | codes::BUSY
        | codes::CHANGED
        | codes::TREE_BUSY
        | codes::TREE_DB_FULL => REFUSED,
        // A daemon that does not know a method, wants a hello first, or is going away
        // is not one we can talk to right now.
        codes::PROTOCOL_MISMATCH
        | codes::METHOD_NOT_FOUND
        | codes::HELLO_REQUIRED
        | codes::SHUTTING_DOWN => UNREACHABLE,
        _ => AGENT_FAILED,
    }
}

/// A mistake in how grove was called, found before talking to the daemon.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Something grove will not do for this caller, found before talking to the daemon.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_errors_map_to_the_documented_codes() {
        assert_eq!(rpc_code(codes::NOT_FOUND), USAGE);
        assert_eq!(rpc_code(codes::BAD_INPUT), USAGE);
        assert_eq!(rpc_code(codes::REFUSED), REFUSED);
        assert_eq!(rpc_code(codes::CONFLICT), REFUSED);
        assert_eq!(rpc_code(codes::PROTOCOL_MISMATCH), UNREACHABLE);
        assert_eq!(rpc_code(codes::SHUTTING_DOWN), UNREACHABLE);
        assert_eq!(rpc_code(codes::GIT_FAILED), AGENT_FAILED);
        assert_eq!(rpc_code(codes::INTERNAL_ERROR), AGENT_FAILED);
    }

    #[test]
    fn local_errors_map_too() {
        let usage = anyhow::Error::from(UsageError("bad".into()));
        assert_eq!(number_for(&usage), USAGE);
        let unreachable = anyhow::Error::from(ClientError::Unreachable {
            path: "/x".into(),
            cause: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        assert_eq!(number_for(&unreachable), UNREACHABLE);
        assert_eq!(number_for(&anyhow::anyhow!("surprise")), AGENT_FAILED);
    }

    #[test]
    fn a_lost_connection_is_said_once() {
        let lost = anyhow::Error::from(grove_proto::ClientError::from(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection",
        )));
        assert_eq!(
            format!("{lost:#}"),
            "lost the connection to the grove daemon: the daemon closed the connection"
        );
    }

    #[test]
    fn clap_usage_errors_exit_2() {
        use clap::Parser;
        let err = crate::cli::Cli::try_parse_from(["grove", "no-such-command"])
            .expect_err("unknown command");
        assert_eq!(err.exit_code(), i32::from(USAGE));
        let err = crate::cli::Cli::try_parse_from(["grove", "--color", "sometimes", "list"])
            .expect_err("bad colour");
        assert_eq!(err.exit_code(), i32::from(USAGE));
    }
}

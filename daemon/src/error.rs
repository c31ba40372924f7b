use grove_proto::codes;
use grove_proto::RpcError;

/// What can go wrong while serving a request. Each kind maps to a stable JSON-RPC code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Ambiguous(String),
    #[error("{0}")]
    InvalidState(String),
    #[error("{0}")]
    Git(String),
    #[error("{0}")]
    Internal(String),
    /// A blocking task died (it panicked, or the runtime is going away): a bug, kept
    /// with its cause.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A file operation failed: what was being done, on which path, and why.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A commit id on record that git cannot parse: what it was, the text, git's cause.
    #[error("bad {what} {text}: {source}")]
    BadCommitId {
        what: &'static str,
        text: String,
        #[source]
        source: git2::Error,
    },
    /// A value of ours that could not be encoded as JSON: a bug, kept with its cause.
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The kernel gave no randomness for an id or a token.
    #[error("no randomness for an id or a token: {0}")]
    Randomness(#[source] std::io::Error),
    /// An owner thread (a repository's lane, the database) is gone.
    #[error(transparent)]
    OwnerGone(#[from] crate::owner::OwnerGone),
    /// A stale write: another writer changed the channel after the writer's base.
    #[error("{0}")]
    Conflict(String),
    /// Refused for capacity, disk pressure or authority.
    #[error("{0}")]
    Refused(String),
    #[error("the daemon is shutting down; start it again with any grove command")]
    ShuttingDown,
}

impl Error {
    pub fn code(&self) -> i64 {
        match self {
            Error::BadInput(_) => codes::BAD_INPUT,
            Error::NotFound(_) => codes::NOT_FOUND,
            Error::Ambiguous(_) => codes::AMBIGUOUS_ID,
            Error::InvalidState(_) => codes::INVALID_STATE,
            Error::Git(_) => codes::GIT_FAILED,
            Error::Internal(_)
            | Error::Task(_)
            | Error::OwnerGone(_)
            | Error::Io { .. }
            | Error::BadCommitId { .. }
            | Error::Encode { .. }
            | Error::Randomness(_) => codes::INTERNAL_ERROR,
            Error::Refused(_) => codes::REFUSED,
            Error::Conflict(_) => codes::CONFLICT,
            Error::ShuttingDown => codes::SHUTTING_DOWN,
        }
    }
}

impl Error {
    /// `map_err(Error::io("read", path))`: an I/O error with what was done and where.
    pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io { what, path, source }
    }
}

impl From<Error> for RpcError {
    fn from(e: Error) -> RpcError {
        RpcError::new(e.code(), e.to_string())
    }
}

impl From<crate::db::DbError> for Error {
    fn from(e: crate::db::DbError) -> Error {
        Error::Internal(e.to_string())
    }
}

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
    /// A checkpoint's code could not be held or named by a ref in the user's
    /// repository: what was being done, in which repository, and git's cause.
    #[error("cannot {what} in {}: {}", repo.display(), source.message())]
    CodeRef {
        what: &'static str,
        repo: std::path::PathBuf,
        #[source]
        source: git2::Error,
    },
    /// A purge could not read or delete a ref: what it was doing, which ref, where.
    #[error("cannot {what} {name} in {}: {}; what was deleted before is in the daemon log", repo.display(), source.message())]
    PurgeRef {
        what: &'static str,
        name: String,
        repo: std::path::PathBuf,
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
    /// An operation on no particular path failed: what was being done, and why.
    #[error("cannot {what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A worktree's set-up (`[worktree]` of .grove.toml, .worktreeinclude) failed on a
    /// file: what it was doing, on which path, and why.
    #[error("setup: {what} `{}`: {source}", path.display())]
    Setup {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `[worktree] run` command that could not be started at all.
    #[error("cannot run setup command `{command}`: {source}")]
    SetupCommand {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The agent's standard input could not be kept for its start.
    #[error("cannot keep the agent's input in {}: {source}; nothing was spawned", dir.display())]
    KeepInput {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A signal to an agent's shim failed.
    #[error("cannot signal agent {id} (pid {pid}): {source}")]
    Signal {
        id: String,
        pid: u32,
        #[source]
        source: nix::errno::Errno,
    },
    /// The cgroup freezer of an agent could not be set (`action`: freeze or thaw).
    #[error("cannot {action} agent {id}'s cgroup: {source}")]
    Freeze {
        id: String,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The core's own records disagree about an agent (`what` says how): a bug.
    #[error("agent {id} {what}")]
    Inconsistent { id: String, what: &'static str },
    /// A jailed agent's repository must be its own (spec in supervisor/jail_paths.rs).
    #[error(
        "cannot jail the agent: {} is not a repository of its own (no .git directory)",
        repo.display()
    )]
    JailWithoutRepo { repo: std::path::PathBuf },
    /// An agent's shim answered its console request with something else.
    #[error("unexpected console answer to {asked}: {answer}")]
    ConsoleAnswer { asked: &'static str, answer: String },
    /// `metrics_listen` names an address that cannot be bound.
    #[error("cannot listen on metrics_listen {addr}: {source}; pick a free address or unset it")]
    MetricsListen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A lock whose holder panicked: a bug.
    #[error("{0} is poisoned (a thread panicked while holding it)")]
    Poisoned(&'static str),
    /// The database failed a read or a write.
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
    /// A change to an agent is made, but its record could not be saved yet: the core
    /// saves it again until it can.
    #[error(
        "agent {id}: done, but its record could not be saved yet ({source}); grove saves it \
         again every few seconds until it can"
    )]
    Unsaved {
        id: String,
        #[source]
        source: crate::db::DbError,
    },
    /// A group of state updates could not be stored; every update in it is refused
    /// (shared: one cause answers every waiting writer).
    #[error("could not store the batch ({0}); nothing was applied")]
    NotStored(#[source] std::sync::Arc<Error>),
    /// The sessions could not be read at start: every session request gets this.
    #[error(
        "the daemon could not read its sessions at start ({0}); nothing was changed; see the \
         daemon log, then `grove daemon restart`"
    )]
    SessionsUnreadable(#[source] std::sync::Arc<Error>),
    /// The finished agents' records could not be read after the start: every request
    /// that needs them gets this.
    #[error(
        "the daemon could not read its finished agents' records ({0}); see the daemon \
         log, then `grove daemon restart`"
    )]
    HistoryUnreadable(#[source] std::sync::Arc<Error>),
    /// An owner thread (a repository's lane, the database) is gone.
    #[error(transparent)]
    OwnerGone(#[from] crate::owner::OwnerGone),
    /// A stale write: another writer changed the channel after the writer's base.
    #[error("{0}")]
    Conflict(String),
    /// Refused for capacity, disk pressure or authority.
    #[error("{0}")]
    Refused(String),
    /// An agent's write would take its tree past `tree_max_db`.
    #[error("{0}")]
    TreeDbFull(String),
    /// What the client showed the user is no longer what the request would act on.
    #[error("{0}")]
    Changed(String),
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
            Error::Git(_) | Error::CodeRef { .. } | Error::PurgeRef { .. } => codes::GIT_FAILED,
            Error::Task(_)
            | Error::OwnerGone(_)
            | Error::Io { .. }
            | Error::BadCommitId { .. }
            | Error::Encode { .. }
            | Error::Randomness(_)
            | Error::Os { .. }
            | Error::Setup { .. }
            | Error::SetupCommand { .. }
            | Error::KeepInput { .. }
            | Error::Signal { .. }
            | Error::Freeze { .. }
            | Error::Inconsistent { .. }
            | Error::JailWithoutRepo { .. }
            | Error::ConsoleAnswer { .. }
            | Error::MetricsListen { .. }
            | Error::Poisoned(_)
            | Error::Db(_)
            | Error::NotStored(_)
            | Error::Unsaved { .. }
            | Error::SessionsUnreadable(_)
            | Error::HistoryUnreadable(_) => codes::INTERNAL_ERROR,
            Error::Refused(_) => codes::REFUSED,
            Error::TreeDbFull(_) => codes::TREE_DB_FULL,
            Error::Changed(_) => codes::CHANGED,
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

/// What the kernel says when space, a quota or a resource is short for now: a collect
/// that failed for one of these is tried again, as it passes.
const PASSING_CAUSES: [i32; 7] = [
    nix::errno::Errno::ENOSPC as i32,
    nix::errno::Errno::EDQUOT as i32,
    nix::errno::Errno::EBUSY as i32,
    nix::errno::Errno::EAGAIN as i32,
    nix::errno::Errno::EMFILE as i32,
    nix::errno::Errno::ENFILE as i32,
    nix::errno::Errno::ENOMEM as i32,
];

impl Error {
    /// True when the cause passes by itself (a full disk, a busy file): the operation
    /// is worth trying again later, as it is, rather than reporting it failed for good.
    pub fn passes(&self) -> bool {
        match self {
            Error::Io { source, .. } | Error::Os { source, .. } | Error::Setup { source, .. } => {
                source
                    .raw_os_error()
                    .is_some_and(|code| PASSING_CAUSES.contains(&code))
            }
            // git and libgit2 report the OS's cause in their own words; these are the
            // C library's texts of the same codes (and SQLite's for a full disk).
            Error::Git(text) => PASSING_CAUSES
                .iter()
                .map(|&code| std::io::Error::from_raw_os_error(code).to_string())
                .map(|said| {
                    said.split(" (os error")
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .chain(["database or disk is full".to_string()])
                .any(|said| text.contains(&said)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod passing_tests {
    use super::Error;

    #[test]
    fn a_full_disk_passes_and_a_bad_ref_does_not() {
        let full = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32);
        assert!(Error::Git(format!("cannot write the index: {full}")).passes());
        assert!(Error::Io {
            what: "write",
            path: "x".into(),
            source: full
        }
        .passes());
        assert!(!Error::Git("unknown revision main~9".into()).passes());
        assert!(!Error::BadInput("no space here".into()).passes());
    }
}

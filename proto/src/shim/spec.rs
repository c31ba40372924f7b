use crate::types::Limits;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Everything the shim needs to run one agent, sent by the daemon on the shim's stdin
/// (never in a file or argv, because the environment may hold secrets).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShimSpec {
    pub agent_id: String,
    pub argv: Vec<String>,
    /// The complete environment of the command (the shim clears its own first).
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    pub timeout_ms: Option<u64>,
    /// Time between SIGTERM and SIGKILL when the tree is stopped.
    pub grace_ms: u64,
    /// Where the exit record goes (written as `<path>.tmp`, then renamed).
    pub exit_record: PathBuf,
    /// The daemon's lock file (it holds the daemon's pid): a daemon that ends up below
    /// this shim is spared.
    #[serde(default)]
    pub daemon_lock: Option<PathBuf>,
    /// Created (exclusively) before the command starts, holding the shim's pid and start
    /// time: a daemon that crashed while this start was under way finds it and adopts
    /// the agent instead of starting it twice.
    #[serde(default)]
    pub claim: Option<PathBuf>,
    /// If this exists when the claim is made, a restarted daemon has already given this
    /// start up (and will start the agent again): the shim runs nothing.
    #[serde(default)]
    pub abandon: Option<PathBuf>,
    /// The agent's private temporary directory (its TMPDIR): the shim creates it before
    /// the command starts and removes it once the whole tree is gone.
    #[serde(default)]
    pub tmp_dir: Option<PathBuf>,
    /// Run the command in a Landlock write jail; `None`: unjailed.
    #[serde(default)]
    pub jail: Option<JailSpec>,
    /// Put the tree in a cgroup v2 of its own when one can be made (`cgroup.kill`, CPU
    /// and memory accounting); otherwise, or when false, the /proc walk alone.
    #[serde(default = "yes")]
    pub cgroup: bool,
    /// A file to give the command as its stdin (input piped into `grove spawn`); the
    /// shim unlinks it once open, so that no copy stays at rest. `None`: `/dev/null`.
    #[serde(default)]
    pub stdin: Option<PathBuf>,
    /// A terminal or a kept-open stdin that the daemon reaches through a socket;
    /// `None`: stdin is /dev/null and the output goes straight to the log.
    #[serde(default)]
    pub console: Option<ConsoleSpec>,
    /// The agent's log, written by the shim within a budget; `None` (a daemon that
    /// sends none): the output goes to the shim's stdout, the log, without one.
    #[serde(default)]
    pub log: Option<LogSpec>,
}

/// The agent's log and its budget (see `grove_proto::agent_log`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogSpec {
    /// `output.log`; the older half is beside it.
    pub path: PathBuf,
    /// Most bytes the log keeps (`log_max`), in two halves.
    pub max_bytes: u64,
}

/// The agent's console (see `console`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSpec {
    /// Where the shim listens for the daemon.
    pub socket: PathBuf,
    /// A pseudo terminal of this size; `None`: a pipe to stdin.
    pub tty: Option<crate::types::TtySize>,
    /// Quiet output for this long, with the agent reading its terminal, is "waiting".
    pub waiting_after_ms: u64,
    /// Pass OSC 8 links in the agent's output on to viewers (`attach_links`).
    #[serde(default)]
    pub attach_links: bool,
    /// Pass the title the agent sets (OSC 0, 1, 2) on to viewers (`attach_title`).
    #[serde(default)]
    pub attach_title: bool,
}

fn yes() -> bool {
    true
}

/// What a jailed agent may write, and what it sees of the machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JailSpec {
    /// Files and directories the agent may write (directories: everything beneath).
    /// Paths that do not exist when the agent starts are skipped.
    pub writable: Vec<PathBuf>,
    /// The agent's own view of the machine (namespaces: `grove_sys::view`): only these
    /// paths exist for it, and it sees only its own processes. `None`: the Landlock
    /// write jail alone, over the whole machine (setup commands).
    #[serde(default)]
    pub view: Option<Vec<ViewEntry>>,
}

/// One path of a jailed agent's view (see `grove_sys::view::Entry`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ViewEntry {
    /// The path at its own place, read-only unless writable.
    Show { path: PathBuf, writable: bool },
    /// An empty directory over the path (that the agent cannot write): what is there
    /// stays hidden.
    Scratch { path: PathBuf },
    /// A symbolic link.
    Link { path: PathBuf, target: PathBuf },
    /// The directory `source`, writable, at `path` (the agent's private home).
    Bind { source: PathBuf, path: PathBuf },
}

impl ViewEntry {
    pub fn path(&self) -> &std::path::Path {
        match self {
            ViewEntry::Show { path, .. }
            | ViewEntry::Scratch { path }
            | ViewEntry::Link { path, .. }
            | ViewEntry::Bind { path, .. } => path,
        }
    }

    pub fn to_sys(&self) -> grove_sys::view::Entry {
        use grove_sys::view::Entry;
        match self.clone() {
            ViewEntry::Show { path, writable } => Entry::Show { path, writable },
            ViewEntry::Scratch { path } => Entry::Scratch { path },
            ViewEntry::Link { path, target } => Entry::Link { path, target },
            ViewEntry::Bind { source, path } => Entry::Bind { source, path },
        }
    }
}

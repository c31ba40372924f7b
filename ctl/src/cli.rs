//! The command line, as clap sees it.

use crate::output::ColorWhen;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Shown after `grove --help`, and in the man page.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  ok
  1  an agent failed (wait, spawn --wait), a doctor check failed, or an unexpected error
  2  usage error or bad input (unknown id, bad ref, bad value)
  3  the daemon is unreachable or speaks another protocol version
  4  refused (disk pressure, authority, a stale state write)
  5  the daemon's database is damaged: `grove daemon recover`
  6  no answer in time (grove ask --timeout)";

#[derive(Debug, Parser)]
#[command(
    name = "grove",
    version,
    about = "Run coding agents in parallel, each in its own git worktree and branch",
    after_help = EXIT_CODES,
    propagate_version = true
)]
pub struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour the output: auto (when stdout is a terminal and NO_COLOR is unset),
    /// always or never.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    pub color: ColorWhen,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start an agent: a command run in a new worktree on its own branch.
    Spawn(Box<SpawnArgs>),
    /// List agent presets: built-in, config.toml's and .grove.toml's [agents.NAME].
    Agents,
    /// List agents (running and recent; --all for every one).
    List {
        /// Include collected, lost and cancelled agents.
        #[arg(long, short)]
        all: bool,
        #[command(flatten)]
        filter: ListFilter,
    },
    /// Show everything known about an agent.
    Show { id: String },
    /// Print an agent's output (on a terminal, control characters escaped; see --raw).
    Logs {
        id: String,
        /// Keep printing as the agent writes, until it ends; then print its outcome line
        /// (on stderr) and exit 1 unless it succeeded, as `grove wait` does.
        #[arg(long, short)]
        follow: bool,
        /// Write the output as the agent wrote it, escape sequences included, even to a
        /// terminal (on a pipe it always is).
        #[arg(long)]
        raw: bool,
    },
    /// Wait until agents finish; exits 1 unless all succeeded.
    Wait {
        #[arg(required = true)]
        ids: Vec<String>,
        /// Return as soon as one of them finishes (prints the finished ones).
        #[arg(long)]
        any: bool,
        /// `waiting`: also return once the agent waits for input (exits 0 then).
        #[arg(long, value_name = "STATE", value_parser = ["finished", "waiting"], default_value = "finished")]
        until: String,
        /// Give up after this long (e.g. 90s, 10m): prints where each agent is, exits 1.
        #[arg(long, value_name = "DURATION")]
        timeout: Option<String>,
    },
    /// Attach to an agent's terminal (spawned with --tty): type to it, see its screen.
    /// Detach with the detach key (Ctrl-] unless --detach-key); the agent keeps running.
    Attach {
        id: String,
        /// Watch only: keys other than the detach key (and Ctrl-C) are not sent.
        #[arg(long)]
        read_only: bool,
        /// The key that detaches, as ctrl-<key> (default ctrl-], or GROVE_DETACH_KEY).
        #[arg(
            long,
            value_name = "KEY",
            env = "GROVE_DETACH_KEY",
            default_value = "ctrl-]"
        )]
        detach_key: String,
    },
    /// Type text into an agent's terminal (or its open stdin), then Enter.
    Send {
        id: String,
        /// The text; several words are joined with spaces (none: just Enter).
        #[arg(conflicts_with = "stdin")]
        text: Vec<String>,
        /// Do not press Enter after the text.
        #[arg(long)]
        no_enter: bool,
        /// Read the text from standard input (a pipe), byte for byte (escapes, control
        /// keys); Enter follows unless --no-enter.
        #[arg(long)]
        stdin: bool,
    },
    /// Print an agent's current screen (spawned with --tty).
    Screen {
        id: String,
        /// Keep colours and attributes (escape sequences).
        #[arg(long)]
        ansi: bool,
    },
    /// Say what this agent is doing (run inside an agent, e.g. from its hooks):
    /// `waiting` for input, or `working`.
    Status {
        #[arg(value_parser = ["waiting", "working"])]
        activity: String,
        /// For this agent instead of the one we run in (from the user's shell).
        #[arg(long)]
        id: Option<String>,
    },
    /// Leave a short final message for whoever spawned this agent (run inside an agent).
    Report {
        /// The message; `-` reads it from standard input.
        text: String,
        /// Report for this agent instead of the one we run in (from the user's shell).
        #[arg(long)]
        id: Option<String>,
    },
    /// Ask a question and wait for the answer (run inside an agent); prints the answer.
    /// The user (`grove answer`) or this agent's parent answers; exits 6 on --timeout.
    Ask {
        /// The question.
        question: String,
        /// The answers it takes, comma-separated (e.g. yes,no); any other is refused.
        #[arg(long, value_delimiter = ',', value_name = "A,B")]
        choices: Vec<String>,
        /// Stop waiting after this long (e.g. 90s, 10m): exits 6, the question goes.
        #[arg(long, value_name = "DURATION")]
        timeout: Option<String>,
    },
    /// Answer an agent's question (`grove ask`); its parent agent may too, no other agent.
    Answer {
        id: String,
        /// The answer (one of its choices, when it gave some).
        text: String,
    },
    /// Stop agents: SIGTERM to each one's whole process tree, SIGKILL after a grace period.
    Kill {
        /// One or more agents (ids or unique prefixes); all are looked up before any is killed.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Return at once instead of waiting until the agent is collected.
        #[arg(long)]
        no_wait: bool,
    },
    /// Freeze an agent's whole process tree (cgroup freezer, else SIGSTOP); `resume` thaws it.
    Pause { id: String },
    /// Thaw an agent that `grove pause` froze.
    Resume { id: String },
    /// Show the agent's branch against its merge-base with its base, as git prints it.
    Diff {
        id: String,
        /// Only the diffstat.
        #[arg(long)]
        stat: bool,
        /// Limit the diff to these paths, after `--`.
        #[arg(last = true, value_name = "PATHS")]
        paths: Vec<String>,
    },
    /// Review finished agents' branches: the unmerged ones, or one in detail.
    Review {
        /// Show this agent's report, commits and diffstat.
        id: Option<String>,
        /// Include branches already merged (by git, or by `grove merge --squash/--rebase`).
        #[arg(long, short)]
        all: bool,
    },
    /// Merge an agent's branch with git (hooks and config apply); nothing changes on conflict.
    Merge(MergeArgs),
    /// Delete an agent's branch; its tip stays reachable at refs/grove/salvage/discarded-ID.
    Discard {
        #[arg(required_unless_present = "merged", conflicts_with = "merged")]
        id: Option<String>,
        /// Every finished agent's branch that is merged (by git, or by `grove merge
        /// --squash/--rebase`); one confirmation for all.
        #[arg(long)]
        merged: bool,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
    /// Files changed by more than one live or unmerged agent branch: collisions ahead.
    Overlaps {
        /// Also show the changed line ranges (in the base's line numbers).
        #[arg(long)]
        hunks: bool,
    },
    /// List agents waiting for a worktree slot, in the order they will start.
    Queue,
    /// The daemon's metrics and service levels (Prometheus: set metrics_listen).
    Metrics,
    /// Remove the kept worktree of a finished agent (its work is salvaged to its branch).
    Rm { id: String },
    /// Run the prune pass now: idle worktrees of finished agents, expired records.
    Gc {
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Show what grove removed, when, why, and which ref holds the work.
        #[arg(long, conflicts_with = "dry_run")]
        log: bool,
    },
    /// List salvage refs (work grove saved from worktrees it could not match to an agent).
    Salvaged,
    /// Bring a salvage ref back as a new branch and worktree.
    Restore {
        /// `refs/grove/salvage/<name>` or just `<name>`.
        reference: String,
        /// The repository (default: the current directory).
        #[arg(long)]
        repo: Option<PathBuf>,
    },
    /// Approve the setup commands of this repository's .grove.toml (its exact content),
    /// like `direnv allow`; a changed file needs approval again.
    Trust {
        /// The repository (default: the current directory).
        #[arg(long)]
        repo: Option<PathBuf>,
        /// Withdraw the approval instead.
        #[arg(long)]
        revoke: bool,
    },
    /// Read and write a session's shared state.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Sessions: groups of agents sharing one state.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Live view of running agents: CPU, memory, runtime, last line (q quits).
    Top {
        /// Print one snapshot and exit, even on a terminal.
        #[arg(long)]
        once: bool,
    },
    /// Check this machine for what grove needs, and explain what is wrong.
    Doctor,
    /// Print the effective configuration and where each value comes from.
    Config,
    /// Print a shell completion script.
    ///
    /// bash: `grove completions bash > ~/.local/share/bash-completion/completions/grove`;
    /// zsh: `grove completions zsh > ~/.zfunc/_grove` (with ~/.zfunc in fpath);
    /// fish: `grove completions fish > ~/.config/fish/completions/grove.fish`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `grove man | man -l -`.
    Man,
    /// Print the ids and names of known agents, one a line, for shell completion (a
    /// daemon that does not run is not started: nothing is printed).
    #[command(name = "__agents", hide = true)]
    CompleteAgents,
    /// Serve grove's tools over MCP on stdio, for AI agents (spawn, wait, diff, merge...).
    ///
    /// Tools: spawn_agent, list_agents, agent_status, wait_agents, agent_logs, agent_diff,
    /// review_agents, overlaps, merge_agent, discard_agent, report_agent, kill_agent,
    /// session_list, session_show, state_get, state_update, state_history, state_fork.
    /// Agents go to the repository the server runs in unless a tool names another.
    /// wait_agents returns after timeout_s (default 50) with what still runs; call it again.
    ///
    /// Register grove with an MCP host (it starts `grove mcp` in your project):
    ///
    ///   Claude Code:  claude mcp add grove -- grove mcp
    ///
    ///   Codex:        codex mcp add grove -- grove mcp
    ///
    ///   Gemini CLI:   gemini mcp add grove grove mcp
    ///
    ///   Cursor:       in .cursor/mcp.json (or ~/.cursor/mcp.json):
    ///                 {"mcpServers": {"grove": {"command": "grove", "args": ["mcp"]}}}
    #[command(verbatim_doc_comment)]
    Mcp,
    /// Control the daemon (it starts by itself when needed).
    Daemon {
        #[command(subcommand)]
        command: DaemonCommand,
    },
}

/// Which agents `grove list` shows.
#[derive(Debug, Args, Default)]
pub struct ListFilter {
    /// Only agents of this repository (a path in it).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// Only agents with this status or outcome (queued, running, paused, collected,
    /// lost, cancelled, succeeded, failed, killed, timed_out); finished ones need no --all.
    #[arg(long, value_name = "STATUS", value_parser = [
        "queued", "preparing", "running", "paused", "exited", "collected", "lost", "cancelled",
        "succeeded", "failed", "killed", "timed_out",
    ])]
    pub status: Option<String>,
    /// Only agents with this name.
    #[arg(long)]
    pub name: Option<String>,
}

impl ListFilter {
    pub fn is_empty(&self) -> bool {
        self.repo.is_none() && self.status.is_none() && self.name.is_none()
    }
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Run the daemon in the foreground.
    Run,
    /// Say whether the daemon runs, and how it is.
    Status,
    /// Stop the daemon. Running agents keep running; the next daemon adopts them.
    Stop,
    /// Stop the daemon, then start a new one (it adopts the running agents).
    Restart,
    /// Apply a changed config.toml (or GROVE_* settings): check it, then restart the
    /// daemon if its settings differ (running agents keep running). A config that
    /// cannot be read changes nothing.
    Reload,
    /// Replace a damaged database with what is readable of it, keeping a copy of the
    /// damaged files, then start the daemon (it adopts the running agents).
    Recover,
    /// Write a systemd user unit that runs the daemon (auto-start works without it).
    Install {
        /// Also run `systemctl --user daemon-reload` and `enable --now grove`.
        #[arg(long)]
        enable: bool,
    },
}

/// Which session a state command is about. Inside an agent, GROVE_SESSION and
/// GROVE_TOKEN say it and no flag is needed.
#[derive(Debug, Args)]
pub struct SessionArg {
    /// The session (default: $GROVE_SESSION).
    #[arg(long, env = "GROVE_SESSION", hide_env_values = true)]
    pub session: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Apply one atomic batch: `grove state update CHANNEL JSON [CHANNEL JSON]...`.
    Update {
        #[command(flatten)]
        session: SessionArg,
        /// Checkpoint you last read; an overwrite of a channel someone else changed
        /// since is refused as a conflict.
        #[arg(long)]
        base: Option<u64>,
        /// Read batches from a file: one JSON object ({"channel": value, ...}) or NDJSON,
        /// one batch per line. `-` reads standard input.
        #[arg(long, conflicts_with = "pairs")]
        file: Option<PathBuf>,
        /// CHANNEL JSON pairs, e.g. `tests_passed 1 files_modified '["a.rs"]'`.
        #[arg(value_name = "CHANNEL JSON")]
        pairs: Vec<String>,
    },
    /// Print the state (or one channel), now or at a checkpoint.
    Get {
        #[command(flatten)]
        session: SessionArg,
        /// Read the state right after this checkpoint.
        #[arg(long)]
        at: Option<u64>,
        /// Read it carried through every `session migrate` since (renames, drops, the
        /// schema chain's conversions), in the newest schema; without it a checkpoint
        /// reads in the schema it was written under.
        #[arg(long, requires = "at")]
        migrate: bool,
        channel: Option<String>,
    },
    /// List checkpoints, newest first.
    History {
        #[command(flatten)]
        session: SessionArg,
        /// How many (read in pages when they do not fit in one answer).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Print each applied update as it happens, until interrupted.
    Watch {
        #[command(flatten)]
        session: SessionArg,
    },
    /// Start a new session from a checkpoint of this one.
    Fork {
        /// The session to fork (default: $GROVE_SESSION).
        #[arg(long = "from", env = "GROVE_SESSION", hide_env_values = true)]
        from: Option<String>,
        #[arg(long)]
        at: u64,
        /// Name of the new session.
        #[arg(long = "session")]
        new_session: String,
        /// Give the new session the newest schema, the checkpoint's state carried
        /// through every `session migrate` since (default: the schema the checkpoint
        /// was written under).
        #[arg(long)]
        migrate: bool,
        /// Also start an agent in the new session on the code an agent had at the
        /// checkpoint (its branch and uncommitted work): the command after `--`.
        #[arg(long, requires = "command")]
        spawn: bool,
        /// With --spawn: the agent's command.
        #[arg(last = true, value_name = "COMMAND", requires = "spawn")]
        command: Vec<String>,
    },
    /// Name the code an agent had at a checkpoint: a commit of its worktree then (its
    /// branch and uncommitted work) on refs/grove/checkpoints/<session>/<N> in its
    /// repository, to start from with `grove spawn --base`. Refused for a checkpoint
    /// the user wrote (it records no code).
    Code {
        #[command(flatten)]
        session: SessionArg,
        /// The checkpoint (`grove state history` lists them and their code).
        #[arg(value_name = "CHECKPOINT")]
        at: u64,
    },
    /// Drop old checkpoints, keeping the newest N readable (the state does not change).
    Compact {
        #[command(flatten)]
        session: SessionArg,
        #[arg(long)]
        keep: u64,
    },
    /// Keep checkpoint N readable through compaction (`--remove` stops keeping it).
    Pin {
        #[command(flatten)]
        session: SessionArg,
        /// The checkpoint.
        at: u64,
        #[arg(long)]
        remove: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Every session: channels, checkpoints, last update, agents.
    List {
        /// Include the sessions grove made for agents spawned without --session.
        #[arg(long, short)]
        all: bool,
    },
    /// One session: its agents and their statuses, schema, sizes.
    Show { name: String },
    /// Move a session to a new schema (a TOML file with a `[state]` table): channels may
    /// be added and reducers changed where the stored value fits; one checkpoint.
    Migrate {
        name: String,
        #[arg(long, value_name = "FILE")]
        schema: PathBuf,
        /// Drop this channel of the old schema, and its value (repeatable).
        #[arg(long = "drop", value_name = "CHANNEL")]
        drop: Vec<String>,
        /// Keep channel OLD of the old schema, with its value, as NEW of the new one
        /// (repeatable).
        #[arg(long = "rename", value_name = "OLD=NEW")]
        rename: Vec<String>,
    },
    /// Delete a session: its state, checkpoints and snapshots (an audit row stays,
    /// shown by `grove gc --log`). Refused while agents of it are live.
    Rm {
        name: String,
        /// Delete it even while agents of it are live.
        #[arg(long, conflicts_with = "purge")]
        force: bool,
        /// Why, for the audit row.
        #[arg(long)]
        reason: Option<String>,
        /// Delete also its checkpoints' code refs and its agents' records, logs and
        /// branches (asks first; salvage refs stay unless --salvage-too).
        #[arg(long)]
        purge: bool,
        /// With --purge: do not ask (for scripts).
        #[arg(long, requires = "purge")]
        yes: bool,
        /// With --purge: delete also its agents' salvage refs.
        #[arg(long, requires = "purge")]
        salvage_too: bool,
    },
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    pub id: String,
    /// Squash the branch into one new commit on the target.
    #[arg(long, conflicts_with = "rebase")]
    pub squash: bool,
    /// Rebase the branch onto the target, then fast-forward the target.
    #[arg(long)]
    pub rebase: bool,
    /// Merge into this branch (default: the branch checked out in the repository).
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// Delete the agent's branch once merged (grove's merge record keeps its tip).
    #[arg(long)]
    pub delete: bool,
}

#[derive(Debug, Args)]
pub struct SpawnArgs {
    /// Name the agent; its branch becomes grove/<name>-<id>.
    #[arg(long)]
    pub name: Option<String>,
    /// Branch, tag or commit to start from, or an agent's id or name for its branch
    /// (default: the repository's HEAD).
    #[arg(long)]
    pub base: Option<String>,
    /// The repository (default: the current directory).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Put the agent in this session (shared state), created on first use; default: a
    /// new session of its own.
    #[arg(long)]
    pub session: Option<String>,
    /// State schema for a new session (a TOML file with a [state] table); default: the
    /// [state] of the repository's .grove.toml.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Set a variable for the agent, as NAME=VALUE (repeatable). The agent otherwise
    /// gets this command's environment. Values stay on disk only until the agent starts.
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Give the agent a minimal environment: of this command's, only PATH, HOME, USER,
    /// LOGNAME, LANG, the --env-keep names and the env_allow setting.
    #[arg(long)]
    pub env_clear: bool,
    /// With --env-clear, also pass on this variable (repeatable).
    #[arg(long, value_name = "NAME", requires = "env_clear")]
    pub env_keep: Vec<String>,
    /// Stop the agent after this long (e.g. 90s, 10m, 2h).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Limit on open files (RLIMIT_NOFILE).
    #[arg(long, value_name = "N")]
    pub max_files: Option<u64>,
    /// Limit on processes and threads of the whole tree at once (pids cgroup).
    #[arg(long, value_name = "N")]
    pub max_procs: Option<u64>,
    /// Limit on address space in bytes (RLIMIT_AS); K, M and G suffixes allowed.
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<String>,
    /// Limit on CPU time (RLIMIT_CPU), e.g. 30s or 5m.
    #[arg(long, value_name = "DURATION")]
    pub cpu_time: Option<String>,
    /// Confine the agent's writes (Landlock) to its worktree, the git data a commit
    /// needs, a private TMPDIR and /dev/null; it cannot signal processes outside
    /// either. Refused on kernels without Landlock ABI 6.
    #[arg(long, overrides_with = "no_jail")]
    pub jail: bool,
    /// Run unjailed even where `jail = true` is configured.
    #[arg(long, overrides_with = "jail")]
    pub no_jail: bool,
    /// Let the jailed agent also write beneath PATH (repeatable).
    #[arg(long, value_name = "PATH")]
    pub jail_write: Vec<PathBuf>,
    /// Keep the worktree after the agent ends.
    #[arg(long)]
    pub keep: bool,
    /// Check out only these directories (sparse checkout, cone mode), for big monorepos.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub sparse: Vec<String>,
    /// Wait for the agent to finish and print its result.
    #[arg(long)]
    pub wait: bool,
    /// Give the agent a terminal of its own (for interactive agents): `grove attach`,
    /// `send` and `screen` reach it; its output still goes to the log.
    #[arg(long, conflicts_with = "stdin")]
    pub tty: bool,
    /// Keep the agent's stdin open for `grove send` (for agents without a terminal).
    #[arg(long)]
    pub stdin: bool,
    /// Run the preset NAME (`grove agents` lists them) instead of a command after `--`:
    /// `grove spawn --agent claude "fix the flaky test"`.
    #[arg(long, value_name = "NAME", conflicts_with = "command")]
    pub agent: Option<String>,
    /// With --agent, the preset's non-interactive form (e.g. `claude -p PROMPT`).
    #[arg(long, requires = "agent")]
    pub headless: bool,
    /// Print the argv the spawn would run (as a JSON array) and spawn nothing.
    #[arg(long)]
    pub print_argv: bool,
    /// With --agent: the prompt (the words are joined with spaces).
    #[arg(value_name = "PROMPT", requires = "agent")]
    pub prompt: Vec<String>,
    /// Do not pass this command's stdin to the agent. Without it, input piped or
    /// redirected from a file into `grove spawn` becomes the agent's stdin (at most
    /// 512 KiB); a terminal or /dev/null never is read.
    #[arg(long)]
    pub no_stdin: bool,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

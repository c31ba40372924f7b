//! Everything grove does to git repositories. git2 for bookkeeping (refs, locks,
//! salvage commits, stats); the `git` CLI only for checkout, where it is much faster
//! (parallel checkout workers). Checkouts run hardened (`hardened_git`): no hooks, no
//! fsmonitor, no global or system config.

pub mod authorship;
pub mod clone_checkout;
pub mod code_store;
pub mod collect;
pub mod deleter;
pub mod lane;
pub mod object_sizes;
pub mod own_repo;
pub mod pool;
pub mod purge;
pub mod refs;
pub mod salvage;
pub mod scratch;
pub mod target;
pub mod users_refs;
pub mod worktree;

use std::ffi::OsString;
use std::process::Command;
use std::sync::OnceLock;

/// The scratch index of a running agent's live diffs, in its state directory
/// (`agent.diff`); it goes once the agent is collected.
pub const LIVE_DIFF_INDEX: &str = "live-diff.index";

/// Where every checkpoint's code ref lives (shared state's checkpoints, by session).
pub const CHECKPOINT_REFS: &str = "refs/grove/checkpoints/";

/// Where a recorded tree waits for its checkpoint's id (by agent).
pub const RECORDING_REFS: &str = "refs/grove/recording/";

/// This daemon's mark on its git processes ([`grove_proto::env::DAEMON_GIT_VAR`]).
static DAEMON_MARK: OnceLock<OsString> = OnceLock::new();

/// Marks every git this daemon runs from now on as this daemon's (by its state
/// directory, which one daemon at a time owns), after killing what a crashed daemon of
/// the same directory left running. Must run under the instance lock and before
/// anything touches a repository: git's helpers (`git worktree add` starts `git reset
/// --hard`, which starts `checkout--worker`s) escape the parent-death signal and would
/// go on writing the worktrees that recovery rolls back and re-creates. With `cgroup`
/// (the setting), they are also put where they die with the daemon.
pub fn take_over_git_of(state_dir: &std::path::Path, cgroup: bool) {
    let mark = state_dir.as_os_str().to_owned();
    let mut entry = format!("{}=", grove_proto::env::DAEMON_GIT_VAR).into_bytes();
    entry.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(mark.as_os_str()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    match grove_sys::supervise::kill_marked(&entry, deadline) {
        Ok(0) => {}
        Ok(killed) => tracing::warn!(killed, "killed git processes a crashed daemon left running"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot look for git processes a crashed daemon left running")
        }
    }
    let _ = DAEMON_MARK.set(mark);
    if !cgroup {
        return;
    }
    let instance = format!(
        "{:016x}",
        crate::ids::stable_hash(state_dir.as_os_str().as_encoded_bytes())
    );
    match grove_sys::git_cgroup::GitCgroup::start(&instance) {
        Ok(cgroup) => {
            tracing::debug!(cgroup = %cgroup.dir().display(), "git processes die with the daemon");
            let _ = GIT_CGROUP.set(cgroup);
        }
        Err(e) => tracing::info!(
            error = %e,
            "no cgroup for git processes: the helpers of a killed daemon's git are \
             killed by the next start instead"
        ),
    }
}

/// The cgroup every git of this daemon joins: emptied by its reaper when the daemon
/// dies, git's own helpers included.
static GIT_CGROUP: OnceLock<grove_sys::git_cgroup::GitCgroup> = OnceLock::new();

/// A `git` command that ignores the daemon's own GIT_* environment, so that a daemon
/// started from inside a git hook or a worktree never acts on the wrong repository.
/// It dies with the daemon (SIGKILL on parent death): a git of a crashed daemon must not
/// go on writing a worktree that the next daemon rolls back or reuses. The parent-death
/// signal follows the thread that started git, so git is only ever run by a thread
/// that waits for it (a repository lane, a blocking task). git's own children escape
/// that signal: they share git's cgroup, which the daemon's reaper kills when the
/// daemon dies, and the daemon's mark finds them where there is none
/// ([`take_over_git_of`]).
pub fn git_command() -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = grove_proto::git::command();
    if let Some(mark) = DAEMON_MARK.get() {
        command.env(grove_proto::env::DAEMON_GIT_VAR, mark);
    }
    let daemon = std::process::id();
    let cgroup = GIT_CGROUP.get();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // calls (prctl, getppid, one write); a daemon gone before the prctl means no start.
    unsafe {
        command.pre_exec(move || {
            if let Some(cgroup) = cgroup {
                // Best effort: outside it, the next start's scan for the mark remains.
                let _ = cgroup.join();
            }
            grove_sys::supervise::die_with_parent(daemon)
        });
    }
    command
}

/// A `git` command for content an agent could have written (its files, its commits,
/// its `.gitattributes`): no hooks, no fsmonitor, no untracked cache, and no system or
/// global config, so that no filter, diff, textconv or merge driver and no credential
/// helper runs. Repository config is still read by git; it must be config grove wrote
/// (or the user's own, in a repository no jailed agent can write), never the agent's.
/// Identity for commits made with it comes from the environment (`GIT_AUTHOR_*`).
pub fn hardened_git() -> Command {
    let mut command = git_command();
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .env_remove("GIT_CONFIG_COUNT")
        .env_remove("GIT_EXTERNAL_DIFF")
        .env_remove("GIT_ASKPASS")
        .env_remove("SSH_ASKPASS")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "protocol.ext.allow=never",
            "-c",
            "submodule.recurse=false",
        ]);
    command
}

/// Runs `git` (hardened, its leading `-C`/`--git-dir` arguments already on it) with
/// `args`, on the index file `index` instead of the repository's own when given.
/// Returns its stdout; a failure carries git's own message, the step and `place`.
pub fn output_on_index(
    mut git: Command,
    index: Option<&std::path::Path>,
    place: &std::path::Path,
    args: &[&str],
) -> Result<Vec<u8>, crate::error::Error> {
    git.args(args);
    if let Some(index) = index {
        git.env("GIT_INDEX_FILE", index);
    }
    let out = git
        .output()
        .map_err(|e| crate::error::Error::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(crate::error::Error::Git(format!(
            "git {} in {} failed: {}",
            args.first().copied().unwrap_or_default(),
            place.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Runs `git -C path -c checkout.workers=<workers> ARGS` (a checkout step in a worktree),
/// hardened: what is checked out may be an agent's commit. A failure carries git's own
/// message.
pub fn run_checkout(
    path: &std::path::Path,
    workers: usize,
    args: &[&str],
) -> Result<(), crate::error::Error> {
    let output = hardened_git()
        .arg("-C")
        .arg(path)
        .arg("-c")
        .arg(format!("checkout.workers={workers}"))
        .args(args)
        .output()
        .map_err(|e| crate::error::Error::Git(format!("cannot run git: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(crate::error::Error::Git(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

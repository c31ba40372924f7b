//! The grove under benchmark: a temp dir under /tmp that holds GROVE_HOME, HOME and the
//! XDG dirs; the real `grove` binary run against it; git run with a fixed identity.
//! Dropping it kills the agents still live, stops the daemon and removes the temp dir.

use anyhow::{bail, Context, Result};
use grove_proto::Client;
use serde_json::Value;
use std::cell::Cell;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Settings of an enclosing grove or git hook that must not reach the grove or git under
/// benchmark (besides `grove_proto::env`'s agent identity and git location variables).
const OUTER_SETTINGS: &[&str] = &[
    "GROVE_WORKTREE_ROOT",
    "GROVE_LOG",
    "GROVE_TEST_PROTOCOL_VERSION",
    "GIT_CONFIG_GLOBAL",
];

const GIT_IDENTITY: &[(&str, &str)] = &[
    ("GIT_AUTHOR_NAME", "grove bench"),
    ("GIT_AUTHOR_EMAIL", "bench@example.invalid"),
    ("GIT_COMMITTER_NAME", "grove bench"),
    ("GIT_COMMITTER_EMAIL", "bench@example.invalid"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
];

pub struct Env {
    /// The temp dir; short, so that the socket path stays far below 108 bytes.
    pub root: PathBuf,
    /// GROVE_HOME.
    pub home: PathBuf,
    grove: PathBuf,
    keep: bool,
    /// Agents spawned so far in this run: each leaves one record.
    pub records: Cell<usize>,
    /// GROVE_POOL_SIZE of the daemon: 0 (no warm pool) except in case 2, so that the
    /// other cases measure what they say.
    pool_size: Cell<u32>,
    /// GROVE_METRICS of the daemon: on, except where case 5 measures what they cost.
    metrics: Cell<bool>,
    /// GROVE_MAX_WORKTREES of the daemon, when a case sets one (case 10's queue).
    max_worktrees: Cell<Option<u32>>,
    /// GROVE_REPO_IDLE_RELEASE of the daemon in seconds, when a case sets one (case 6
    /// waits for the release rather than the default minute).
    repo_idle_release: Cell<Option<u64>>,
    /// GROVE_WORKTREE_ROOT of the daemon, when a case puts worktrees on a filesystem of
    /// its own (case 15).
    worktree_root: std::cell::RefCell<Option<PathBuf>>,
}

impl Env {
    pub fn new(grove: PathBuf, keep: bool) -> Result<Env> {
        let root = nix::unistd::mkdtemp("/tmp/gbXXXXXX").context("creating a temp dir in /tmp")?;
        let home = root.join("h");
        std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
        Ok(Env {
            root,
            home,
            grove,
            keep,
            records: Cell::new(0),
            pool_size: Cell::new(0),
            metrics: Cell::new(true),
            max_worktrees: Cell::new(None),
            repo_idle_release: Cell::new(None),
            worktree_root: Default::default(),
        })
    }

    /// Another environment with the same grove: its own temp dir and daemon, for
    /// daemons measured side by side.
    pub fn sibling(&self) -> Result<Env> {
        Env::new(self.grove.clone(), self.keep)
    }

    pub fn socket(&self) -> PathBuf {
        self.home.join("grove.sock")
    }

    pub fn exit_record(&self, id: &str) -> PathBuf {
        self.home.join("agents").join(id).join("exit.json")
    }

    fn apply_env(&self, command: &mut Command) {
        for var in grove_proto::env::AGENT_IDENTITY_VARS
            .iter()
            .chain(grove_proto::env::GIT_LOCATION_VARS)
            .chain(OUTER_SETTINGS)
        {
            command.env_remove(var);
        }
        let xdg = self.root.join("xdg");
        command
            .env("GROVE_HOME", &self.home)
            .env("HOME", &self.root)
            .env("XDG_STATE_HOME", xdg.join("state"))
            .env("XDG_DATA_HOME", xdg.join("data"))
            .env("XDG_CONFIG_HOME", xdg.join("config"))
            .env("XDG_RUNTIME_DIR", xdg.join("run"))
            .env("NO_COLOR", "1")
            .env("GROVE_POOL_SIZE", self.pool_size.get().to_string())
            .env("GROVE_METRICS", self.metrics.get().to_string())
            .envs(
                self.max_worktrees
                    .get()
                    .map(|n| ("GROVE_MAX_WORKTREES", n.to_string())),
            )
            .envs(
                self.repo_idle_release
                    .get()
                    .map(|secs| ("GROVE_REPO_IDLE_RELEASE", format!("{secs}s"))),
            )
            .envs(
                self.worktree_root
                    .borrow()
                    .as_ref()
                    .map(|root| ("GROVE_WORKTREE_ROOT", root.clone())),
            )
            .envs(GIT_IDENTITY.iter().copied());
    }

    /// `grove` with the benchmark's environment, run in `cwd` (a repo, or the temp dir).
    pub fn grove_command(&self, cwd: &Path) -> Command {
        let mut command = Command::new(&self.grove);
        self.apply_env(&mut command);
        command.current_dir(cwd).stdin(Stdio::null());
        command
    }

    /// `git -C repo` with the benchmark's environment.
    pub fn git_command(&self, repo: &Path) -> Command {
        let mut command = Command::new("git");
        self.apply_env(&mut command);
        command.arg("-C").arg(repo).stdin(Stdio::null());
        command
    }

    pub fn grove<S: AsRef<OsStr>>(&self, cwd: &Path, args: &[S]) -> Result<String> {
        output(self.grove_command(cwd).args(args))
    }

    /// `grove --json ARGS`, parsed.
    pub fn grove_json<S: AsRef<OsStr>>(&self, cwd: &Path, args: &[S]) -> Result<Value> {
        let stdout = output(self.grove_command(cwd).arg("--json").args(args))?;
        serde_json::from_str(&stdout).with_context(|| format!("grove printed no JSON: {stdout}"))
    }

    pub fn git<S: AsRef<OsStr>>(&self, repo: &Path, args: &[S]) -> Result<String> {
        output(self.git_command(repo).args(args))
    }

    /// `grove --json spawn -- ARGV` in `repo`; returns the agent's record.
    pub fn spawn(&self, repo: &Path, argv: &[&str]) -> Result<Value> {
        self.spawn_with(repo, &[], argv)
    }

    /// As [`Env::spawn`], with `flags` before the command (`--jail`, say).
    pub fn spawn_with(&self, repo: &Path, flags: &[&str], argv: &[&str]) -> Result<Value> {
        let mut args = vec!["spawn"];
        args.extend_from_slice(flags);
        args.push("--");
        args.extend_from_slice(argv);
        let record = self.grove_json(repo, &args)?;
        self.records.set(self.records.get() + 1);
        if record["id"].as_str().is_none() {
            bail!("grove spawn printed a record without an id: {record}");
        }
        Ok(record)
    }

    /// Starts the daemon if none runs, and returns a connection that has said hello.
    pub fn client(&self) -> Result<Client> {
        self.grove(&self.root, &["list"])?;
        Client::connect(&self.socket())
            .with_context(|| format!("connecting to {}", self.socket().display()))
    }

    /// The daemon's pid, starting the daemon if none runs.
    pub fn daemon_pid(&self) -> Result<u32> {
        self.grove(&self.root, &["list"])?;
        let status = self.grove_json(&self.root, &["daemon", "status"])?;
        status["pid"]
            .as_u64()
            .map(|pid| pid as u32)
            .with_context(|| format!("`grove daemon status` gave no pid: {status}"))
    }

    /// Restarts the daemon (on the next command) with a warm pool of `size`.
    pub fn set_pool_size(&self, size: u32) -> Result<()> {
        self.kill_live_agents()?;
        self.stop_daemon()?;
        self.pool_size.set(size);
        Ok(())
    }

    /// Restarts the daemon (on the next command) with its metrics on or off.
    pub fn set_metrics(&self, on: bool) -> Result<()> {
        self.stop_daemon()?;
        self.metrics.set(on);
        Ok(())
    }

    /// Restarts the daemon (on the next command) with at most `cap` worktrees, or the
    /// default.
    pub fn set_max_worktrees(&self, cap: Option<u32>) -> Result<()> {
        self.kill_live_agents()?;
        self.stop_daemon()?;
        self.max_worktrees.set(cap);
        Ok(())
    }

    /// Restarts the daemon (on the next command) closing idle repositories after
    /// `secs`, or after the default.
    pub fn set_repo_idle_release(&self, secs: Option<u64>) -> Result<()> {
        self.kill_live_agents()?;
        self.stop_daemon()?;
        self.repo_idle_release.set(secs);
        Ok(())
    }

    /// Restarts the daemon (on the next command) with its worktrees under `root`, or
    /// under the default root.
    pub fn set_worktree_root(&self, root: Option<PathBuf>) -> Result<()> {
        self.kill_live_agents()?;
        self.stop_daemon()?;
        *self.worktree_root.borrow_mut() = root;
        Ok(())
    }

    pub fn stop_daemon(&self) -> Result<()> {
        self.grove(&self.root, &["daemon", "stop"]).map(drop)
    }

    /// Stops the running daemon and starts `grove daemon run` in the foreground; returns
    /// it once it printed its ready line, with when it was started and how long that took.
    pub fn start_daemon_until_ready(&self) -> Result<(std::process::Child, Instant, Duration)> {
        self.stop_daemon()?;
        let mut command = self.grove_command(&self.root);
        command
            .args(["daemon", "run"])
            .env("GROVE_NOTIFY_READY", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let start = Instant::now();
        let mut child = command.spawn().context("starting grove daemon run")?;
        let stdout = child.stdout.take().context("daemon stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let ready = BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .any(|line| line.trim() == "grove-daemon-ready");
            let _ = tx.send((ready, Instant::now()));
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok((true, at)) => Ok((child, start, at - start)),
            Ok((false, _)) => {
                let status = child.wait()?;
                bail!("grove daemon run ended ({status}) without saying it was ready")
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("grove daemon run was not ready within 120s")
            }
        }
    }

    /// Kills every agent still live (their shims would outlive the daemon).
    pub fn kill_live_agents(&self) -> Result<()> {
        let list = self.grove_json(&self.root, &["list"])?;
        let ids: Vec<String> = list["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["id"].as_str().map(String::from))
            .collect();
        for id in &ids {
            // It may have ended meanwhile; the wait below tells.
            let _ = self.grove(&self.root, &["kill", "--no-wait", id]);
        }
        if !ids.is_empty() {
            let mut args = vec!["wait".to_string()];
            args.extend(ids);
            // Exit 1 (killed agents did not succeed) is expected here.
            let _ = self.grove_command(&self.root).args(&args).output();
        }
        Ok(())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Err(e) = self.kill_live_agents() {
            eprintln!("grove-bench: killing leftover agents: {e:#}");
        }
        if let Err(e) = self.stop_daemon() {
            eprintln!("grove-bench: stopping the daemon: {e:#}");
        }
        if self.keep {
            eprintln!("grove-bench: kept {}", self.root.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("grove-bench: removing {}: {e}", self.root.display());
        }
    }
}

/// `program arg arg...`, without the environment that `{:?}` of a Command shows.
fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `command`, insists on success, returns its stdout.
pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", describe(command)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}{}",
            describe(command),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `command` to completion and returns how long it took; fails unless it succeeds.
pub fn timed(command: &mut Command) -> Result<Duration> {
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let start = Instant::now();
    let out = command
        .output()
        .with_context(|| format!("running {}", describe(command)))?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(command),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// Checks `condition` every `interval` until it holds; returns the instant it was seen
/// to hold. A benchmark may poll: `interval` bounds the error of that instant.
pub fn poll_until(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut condition: impl FnMut() -> Result<bool>,
) -> Result<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if condition()? {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("gave up after {}s waiting for {what}", limit.as_secs());
        }
        std::thread::sleep(interval);
    }
}

/// The string field `name` of a JSON record.
pub fn field<'a>(record: &'a Value, name: &str) -> Result<&'a str> {
    record[name]
        .as_str()
        .with_context(|| format!("record has no `{name}`: {record}"))
}

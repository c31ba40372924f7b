//! A grove under test: a temp dir with GROVE_HOME, HOME and XDG dirs, a real git repo,
//! and helpers to run the real `grove` binary against them. Dropping it stops the daemon.
#![allow(dead_code)]

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

pub mod clis;
#[cfg(target_os = "linux")]
pub mod loopfs;
pub mod pty;
mod tmpfs;
#[allow(unused_imports)]
pub use tmpfs::{small_fs, Tmpfs};

pub const BIN: &str = env!("CARGO_BIN_EXE_grove-e2e");
/// The shim binary the daemon of `BIN` finds next to it (`<its name>-shim`).
pub const SHIM_BIN: &str = env!("CARGO_BIN_EXE_grove-e2e-shim");

/// Settings of an enclosing grove that must not leak into the grove under test (besides
/// the agent identity, `grove_proto::env::AGENT_IDENTITY_VARS`).
const OUTER_GROVE_SETTINGS: &[&str] = &["GROVE_WORKTREE_ROOT", "GROVE_TEST_PROTOCOL_VERSION"];

/// Whether the outer environment's variable says "a CI machine runs this". The agent
/// CLIs read these and change what they are (Gemini CLI goes headless on `CI=true`,
/// ink stops drawing on any `CI_*`): agents must start as on a user's machine.
fn marks_ci(var: &str) -> bool {
    matches!(var, "CI" | "CONTINUOUS_INTEGRATION" | "GITHUB_ACTIONS") || var.starts_with("CI_")
}

pub struct Grove {
    pub dir: TempDir,
    pub home: PathBuf,
    pub repo: PathBuf,
    /// Extra environment for every grove command (and so for the daemon they start).
    pub env: Vec<(String, String)>,
    /// The grove binary run: `BIN` unless a test runs a copy of it.
    pub bin: PathBuf,
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Insists that the message on stderr holds every needle (`args` name the command).
    fn assert_says(&self, args: &[&str], needles: &[&str]) {
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "{args:?}: expected {needle:?} in {}",
                self.stderr
            );
        }
    }

    /// Insists on exit code `code` and a message on stderr holding every needle.
    pub fn assert_exit(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, code, "{}\n{}", self.stdout, self.stderr);
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "missing {needle:?} in {}",
                self.stderr
            );
        }
    }

    fn from(output: Output) -> Out {
        Out {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Grove {
    /// A grove with a repository `repo` holding one commit on `main`.
    pub fn new() -> Grove {
        let grove = Grove::without_repo();
        init_repo(&grove.repo);
        grove
    }

    /// A grove whose `repo` directory does not exist yet.
    pub fn without_repo() -> Grove {
        let dir = short_temp_dir("g");
        let home = dir.path().join("h");
        let repo = dir.path().join("repo");
        fs::create_dir_all(dir.path().join("files")).expect("mkdir files");
        Grove {
            dir,
            home,
            repo,
            env: Vec::new(),
            bin: PathBuf::from(BIN),
        }
    }

    /// Runs `bin` instead of `BIN` (a copy of it elsewhere, say).
    pub fn with_bin(mut self, bin: &Path) -> Grove {
        self.bin = bin.to_path_buf();
        self
    }

    /// Adds environment for every command of this grove (daemon settings, say).
    pub fn with_env(mut self, vars: &[(&str, &str)]) -> Grove {
        self.env
            .extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// Puts a `git` first on PATH for every command of this grove (and so for the
    /// daemon): a shell script that runs `prelude` with git's arguments, then the real
    /// git. For tests that watch or slow down the daemon's git.
    #[allow(dead_code)]
    pub fn with_git_wrapper(self, prelude: &str) -> Grove {
        let bin = self.dir.path().join("git-wrapper");
        fs::create_dir_all(&bin).expect("mkdir");
        let real = Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .expect("which git")
            .stdout;
        let real = String::from_utf8(real).expect("utf8");
        let script = format!("#!/bin/sh\n{prelude}\nexec '{}' \"$@\"\n", real.trim());
        let git = bin.join("git");
        fs::write(&git, script).expect("write");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&git, fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        self.with_env(&[("PATH", path.as_str())])
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        let root = self.dir.path();
        for var in grove_proto::env::AGENT_IDENTITY_VARS
            .iter()
            .chain(OUTER_GROVE_SETTINGS)
        {
            command.env_remove(var);
        }
        for (var, _) in std::env::vars_os() {
            if var.to_str().is_some_and(marks_ci) {
                command.env_remove(var);
            }
        }
        command
            .env("GROVE_HOME", &self.home)
            .env("HOME", root)
            .env("XDG_STATE_HOME", root.join("xdg/state"))
            .env("XDG_DATA_HOME", root.join("xdg/data"))
            .env("XDG_CONFIG_HOME", root.join("xdg/config"))
            .env("XDG_RUNTIME_DIR", root.join("xdg/run"))
            .env("GROVE_KILL_GRACE", "1000")
            // Most tests compare `git worktree list` with the agents; tests/pool.rs
            // turns the warm pool on.
            .env("GROVE_POOL_SIZE", "0")
            // The host's own disk use must not trip tests that are not about it (a
            // busy machine's /tmp passed 80 %); tests/disk_pressure.rs sets the
            // thresholds it tests, on a tmpfs of its own.
            .env("GROVE_DISK_HIGH", "98")
            .env("GROVE_DISK_LOW", "95")
            // Likewise latency service levels, which a loaded machine breaches (a
            // daemon start over 500 ms fails `grove doctor`); tests/metrics.rs sets
            // the ones it tests.
            .env("GROVE_SLO_START_READY_P99", "60s")
            .env("GROVE_SLO_CHECKPOINT_SAVE_P95", "60s")
            .env("GROVE_SLO_RESTORE_P95", "60s")
            .env("GROVE_SLO_COLD_START_P99", "60s")
            .env("GROVE_LOG", "debug")
            // Files the tests hand their agents (scripts, gates): a jailed agent's
            // view shows these, read-only, and nothing else of the test's $HOME.
            .env("GROVE_JAIL_SHOW", self.files())
            .env("NO_COLOR", "1")
            .envs(git_identity())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(if self.repo.exists() { &self.repo } else { root })
            // `grove spawn` passes a piped stdin on to the agent: a test harness's pipe
            // that never closes would hang it. Tests that pipe input say so.
            .stdin(Stdio::null());
        command
    }

    pub fn run(&self, args: &[&str]) -> Out {
        Out::from(self.command().args(args).output().expect("running grove"))
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut command = self.command();
        command.args(args);
        for (k, v) in env {
            command.env(k, v);
        }
        Out::from(command.output().expect("running grove"))
    }

    /// Runs grove and insists on success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code,
            0,
            "grove {args:?} failed\nstdout: {}\nstderr: {}\ndaemon log:\n{}",
            out.stdout,
            out.stderr,
            self.daemon_log()
        );
        out.stdout
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let stdout = self.ok(&all);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: bad JSON {e}: {stdout}"))
    }

    /// Spawns `sh -c script` in the repo; returns the agent id.
    pub fn spawn(&self, extra: &[&str], script: &str) -> String {
        let mut args = vec!["spawn"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        let id = self.ok(&args).trim().to_string();
        assert_eq!(id.len(), 8, "spawn printed {id:?}");
        id
    }

    /// Waits for one agent and returns its final record.
    pub fn wait(&self, id: &str) -> Value {
        let out = self.run(&["--json", "wait", id]);
        let list: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("wait {id}: {e}: {} {}", out.stdout, out.stderr));
        list["agents"][0].clone()
    }

    /// Waits for agent `id`, which must succeed; its log.
    pub fn succeeded_log(&self, id: &str) -> String {
        let record = self.wait(id);
        let log = self.ok(&["logs", id]);
        assert_eq!(record["outcome"], "succeeded", "{record}\n{log}");
        log
    }

    pub fn record(&self, id: &str) -> Value {
        self.json(&["show", id])
    }

    pub fn git(&self, args: &[&str]) -> String {
        git_in(&self.repo, args)
    }

    /// The file `path` at `rev` of the test repository.
    pub fn file_at(&self, rev: &str, path: &str) -> String {
        self.git(&["show", &format!("{rev}:{path}")])
    }

    /// The file `path` on agent `id`'s branch.
    pub fn agent_file(&self, id: &str, path: &str) -> String {
        self.file_at(&format!("grove/{id}"), path)
    }

    pub fn daemon_log(&self) -> String {
        fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default()
    }

    /// Lines of the daemon log that mention `needle` (leaked: only for failure messages).
    pub fn daemon_log_lines(&self, needle: &str) -> Vec<&'static str> {
        let log: &'static str = Box::leak(self.daemon_log().into_boxed_str());
        log.lines().filter(|l| l.contains(needle)).collect()
    }

    /// The daemon's pid, starting the daemon if none runs.
    pub fn daemon_pid(&self) -> i32 {
        self.ok(&["list"]);
        self.json(&["daemon", "status"])["pid"]
            .as_i64()
            .expect("daemon pid") as i32
    }

    pub fn worktree_root(&self) -> PathBuf {
        self.env
            .iter()
            .find(|(k, _)| k == "GROVE_WORKTREE_ROOT")
            .map(|(_, v)| PathBuf::from(v))
            .unwrap_or_else(|| self.home.join("worktrees"))
    }

    /// Kills the daemon with SIGKILL and waits until it is gone.
    /// Runs `args` with the daemon set to crash at `point` (daemon/src/faults.rs); the
    /// command must fail, and this returns once that daemon is gone.
    pub fn crash_during(&self, point: &str, args: &[&str]) {
        // No retry: a retry would start a daemon with the same crash point again.
        let out = self.run_env(
            args,
            &[("GROVE_TEST_CRASH_AT", point), ("GROVE_RETRY_FOR", "0")],
        );
        assert_ne!(
            out.code, 0,
            "{point}: {args:?} should have lost its daemon: {}",
            out.stdout
        );
        self.await_daemon_gone("the crashed daemon is gone", Duration::from_secs(10));
    }

    /// Spawns an agent (with the flags `extra`) that runs `work`, then waits for a gate,
    /// on a daemon set to crash at `point` (daemon/src/faults.rs); opens the gate and
    /// returns the agent's id once that daemon died collecting it.
    pub fn crash_collecting(&self, point: &str, extra: &[&str], work: &str) -> String {
        // Where a jailed agent sees it too.
        let gate = self.files().join("gate");
        let script = format!(
            "{work}; while [ ! -e '{}' ]; do sleep 0.02; done",
            gate.display()
        );
        let args = [&["spawn"], extra, &["--", "sh", "-c", &script]].concat();
        let out = self.run_env(&args, &[("GROVE_TEST_CRASH_AT", point)]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let id = out.stdout.trim().to_string();
        let pid = self.json(&["daemon", "status"])["pid"]
            .as_i64()
            .expect("pid") as i32;
        fs::write(&gate, "").expect("gate");
        eventually(
            "the daemon crashed collecting",
            Duration::from_secs(30),
            || !process_exists(pid),
        );
        id
    }

    /// The pid in daemon.lock: the daemon that runs or ran last, if it wrote one.
    pub fn locked_daemon_pid(&self) -> Option<i32> {
        fs::read_to_string(self.home.join("daemon.lock"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
    }

    /// Returns once no daemon of daemon.lock lives (it crashed or stopped).
    pub fn await_daemon_gone(&self, what: &str, limit: Duration) {
        eventually(what, limit, || {
            self.locked_daemon_pid()
                .is_none_or(|pid| !process_exists(pid))
        });
    }

    pub fn crash_daemon(&self) {
        let pid = self.daemon_pid();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill -9 daemon");
        eventually("daemon gone", Duration::from_secs(10), || {
            !process_exists(pid)
        });
    }

    /// How many warm-pool worktrees `daemon status` shows ready.
    pub fn ready_pool_worktrees(&self) -> usize {
        self.json(&["daemon", "status"])["pool"]
            .as_array()
            .expect("pool")
            .iter()
            .filter(|p| p["ready"] == true)
            .count()
    }

    pub fn status(&self, id: &str) -> String {
        self.record(id)["status"].as_str().unwrap_or("").to_string()
    }

    /// Spawns an agent that runs `before`, waits until the returned gate file exists (the
    /// test makes it), then runs `after`; either may be empty.
    pub fn spawn_gated(&self, extra: &[&str], before: &str, after: &str) -> (String, PathBuf) {
        let gate = self.dir.path().join("gate");
        let wait = format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display());
        let script: Vec<&str> = [before, &wait, after]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect();
        (self.spawn(extra, &script.join("; ")), gate)
    }

    /// Makes the session `session` over the schema file `schema` the way an agent's
    /// spawn does (`--schema`), with an agent that runs `true`; returns once it ended.
    pub fn session_by_spawn(&self, session: &str, schema: &Path) {
        let schema = schema.to_str().expect("utf8");
        let id = self.spawn(&["--session", session, "--schema", schema], "true");
        self.wait(&id);
    }

    /// `grove state update --session <session> <args>`, which must succeed; its stdout.
    pub fn state_update(&self, session: &str, args: &[&str]) -> String {
        let mut all = vec!["state", "update", "--session", session];
        all.extend_from_slice(args);
        self.ok(&all)
    }

    /// Every agent `grove list --all` shows.
    pub fn all_agents(&self) -> Vec<Value> {
        each(&self.json(&["list", "--all"]), "agents")
            .cloned()
            .collect()
    }

    /// Runs grove and insists on a refusal (exit code 2) whose message holds `needle`.
    pub fn refused(&self, args: &[&str], needle: &str) -> Out {
        self.refused_all(args, &[needle])
    }

    /// Runs grove and insists on a refusal (exit code 2) whose message holds every needle.
    pub fn refused_all(&self, args: &[&str], needles: &[&str]) -> Out {
        let out = self.run(args);
        assert_eq!(out.code, 2, "{args:?}: {} {}", out.stdout, out.stderr);
        out.assert_says(args, needles);
        out
    }

    /// Runs grove and insists it fails (any exit code but 0) with every needle in its
    /// message.
    pub fn fails(&self, args: &[&str], needles: &[&str]) -> Out {
        let out = self.run(args);
        assert_ne!(out.code, 0, "{args:?}: {}", out.stdout);
        out.assert_says(args, needles);
        out
    }

    /// Stops the daemon and opens its database, for a test that reads or tampers with it
    /// as a crash or an older grove would have left it.
    pub fn stopped_db(&self) -> rusqlite::Connection {
        self.ok(&["daemon", "stop"]);
        rusqlite::Connection::open(self.home.join("grove.db")).expect("open grove.db")
    }

    /// Stops the daemon and runs `sql` on its database; returns the rows it changed.
    pub fn alter_stopped_db(&self, sql: &str) -> usize {
        self.stopped_db().execute(sql, []).expect(sql)
    }

    /// Insists that agent `id`'s branch holds one commit over main, `subject`, and that
    /// `file` on it holds `content`.
    pub fn assert_one_commit_on_branch(&self, id: &str, subject: &str, file: &str, content: &str) {
        let branch = format!("grove/{id}");
        assert_eq!(
            self.git(&["log", "--format=%s", &format!("main..{branch}")]),
            format!("{subject}\n")
        );
        assert_eq!(self.file_at(&branch, file), content);
    }

    /// Waits for agent `id` to succeed, then for the child it spawned and wrote to
    /// `child.id` on its branch; returns that child and its final record.
    pub fn child_of_succeeded(&self, id: &str) -> (String, Value) {
        let record = self.wait(id);
        assert_eq!(record["outcome"], "succeeded", "{}", self.ok(&["logs", id]));
        let child = self.agent_file(id, "child.id").trim().to_string();
        let child_record = self.wait(&child);
        (child, child_record)
    }

    /// The worktrees git lists for the test repository (its main checkout is one).
    pub fn git_worktree_count(&self) -> usize {
        self.git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count()
    }

    /// No agent worktree is left, on disk or in git's list, and the repository is sound.
    pub fn assert_no_worktree_left(&self) {
        assert!(
            self.worktree_dirs().is_empty(),
            "{:?}",
            self.worktree_dirs()
        );
        let porcelain = self.git(&["worktree", "list", "--porcelain"]);
        assert_eq!(porcelain.matches("worktree ").count(), 1, "{porcelain}");
        self.git(&["fsck", "--strict"]);
    }

    /// Makes the directory `name` in the test's temp dir (if it is not there yet); its
    /// path.
    pub fn make_dir(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::create_dir_all(&path).expect("mkdir");
        path
    }

    /// Writes `text` to the file `name` in the test's temp dir; its path.
    /// Writes a file for the test's agents into [`Grove::files`].
    pub fn write_file(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.files().join(name);
        fs::write(&path, text).expect("write file");
        path
    }

    /// Where the test keeps files its agents read: shown to jailed agents too.
    pub fn files(&self) -> PathBuf {
        self.dir.path().join("files")
    }

    /// Writes `text` as grove's config.toml (in GROVE_HOME).
    pub fn write_config(&self, text: impl AsRef<[u8]>) {
        fs::create_dir_all(&self.home).expect("home");
        fs::write(self.home.join("config.toml"), text).expect("config");
    }

    /// The worktree directories whose name starts with `prefix` (`pool-`, `merge-`).
    pub fn worktree_dirs_named(&self, prefix: &str) -> Vec<PathBuf> {
        self.worktree_dirs()
            .into_iter()
            .filter(|d| {
                d.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect()
    }

    /// Every directory two levels below the worktree root (one per agent worktree),
    /// but a removed worktree whose files are still being deleted (`.grove-trash-*`:
    /// the daemon deletes them after it reports the collect) and the templates cloned
    /// worktrees are made from (`.grove-template-*`).
    pub fn worktree_dirs(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for repo_dir in fs::read_dir(self.worktree_root())
            .into_iter()
            .flatten()
            .flatten()
        {
            for wt in fs::read_dir(repo_dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = wt.file_name();
                let name = name.to_string_lossy();
                if !name.starts_with(".grove-trash-") && !name.starts_with(".grove-template-") {
                    found.push(wt.path());
                }
            }
        }
        found
    }
}

impl Drop for Grove {
    fn drop(&mut self) {
        // A failed test must not leave its agents running: stop every live shim (each
        // takes its process tree along), then the daemon.
        if let Ok(out) = self.command().args(["--json", "list"]).output() {
            let live: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            for agent in live["agents"].as_array().into_iter().flatten() {
                if let Some(pid) = agent["pid"].as_i64() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
            }
        }
        let _ = self.command().args(["daemon", "stop"]).output();
        // A daemon that did not stop must not outlive the test.
        if let Ok(pid) = fs::read_to_string(self.home.join("daemon.lock")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                let lock = fs::File::open(self.home.join("daemon.lock"));
                let held = lock
                    .map(|f| {
                        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
                            .is_err()
                    })
                    .unwrap_or(false);
                if held {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

/// A protocol client of `g`'s daemon (started first if needed).
pub fn client(g: &Grove) -> grove_proto::Client {
    g.ok(&["list"]);
    grove_proto::Client::connect(&g.home.join("grove.sock")).expect("connect")
}

/// Calls `method`; the result, or the JSON-RPC error.
pub fn call(
    c: &mut grove_proto::Client,
    method: &str,
    params: Value,
) -> Result<Value, grove_proto::RpcError> {
    let response = c.call_raw(method, params).expect("call");
    match response.error {
        Some(error) => Err(error),
        None => Ok(response.result.unwrap_or(Value::Null)),
    }
}

/// The check called `name` in a `grove --json doctor` report.
pub fn doctor_check(report: &Value, name: &str) -> Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

/// A session schema with one counter: all most session tests need.
pub const COUNTER_SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
"#;

/// Creates the session `name` over `schema` (as read from a test.toml).
pub fn create_session(c: &mut grove_proto::Client, name: &str, schema: &str) {
    create_session_from(c, name, "test.toml", schema);
}

/// Creates the session `name` over `schema` as read from the file `origin`.
pub fn create_session_from(c: &mut grove_proto::Client, name: &str, origin: &str, schema: &str) {
    call(
        c,
        "session.create",
        serde_json::json!({"name": name, "schema_text": {"origin": origin, "text": schema}}),
    )
    .expect("session.create");
}

/// A grove with the session `name` over `schema`, and the client that created it.
pub fn grove_with_session(name: &str, schema: &str) -> (Grove, grove_proto::Client) {
    let g = Grove::new();
    let mut c = client(&g);
    create_session(&mut c, name, schema);
    (g, c)
}

/// Spawns `script` as an agent of `session`, with `$GROVE_BIN` to run grove; its id.
pub fn spawn_in_session(g: &Grove, session: &str, script: &str) -> String {
    spawn_in_session_with(g, session, &[], script)
}

/// Spawns `script` as an agent of `session` with the flags `extra` (`--jail`, say), and
/// `$GROVE_BIN` to run grove; its id.
pub fn spawn_in_session_with(g: &Grove, session: &str, extra: &[&str], script: &str) -> String {
    let bin = format!("GROVE_BIN={BIN}");
    g.spawn(
        &[&["--session", session, "--env", &bin], extra].concat(),
        script,
    )
}

/// An agent of `session` adds 1 to `count`, then runs `grove COMMAND` (shell words);
/// once it ended, that command's exit code and stderr.
pub fn agent_of_session_runs(g: &Grove, session: &str, command: &str) -> (String, String) {
    let result = g.dir.path().join(format!("result-{session}"));
    let script = format!(
        r#""$GROVE_BIN" state update count 1 || exit 1
           "$GROVE_BIN" {command} 2> '{r}.err'; echo $? > '{r}.code'"#,
        r = result.display()
    );
    let id = spawn_in_session(g, session, &script);
    g.wait(&id);
    let read = |ext: &str| fs::read_to_string(result.with_extension(ext)).expect(ext);
    (read("code").trim().to_string(), read("err"))
}

/// Commits `schema` as the test repository's .grove.toml.
pub fn commit_schema(g: &Grove, schema: &str) {
    fs::write(g.repo.join(".grove.toml"), schema).expect("schema");
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "schema"]);
}

/// A spawn whose agent writes its `--env` value to x.txt: "kept" in x.txt on its branch
/// after a crash shows that the agent started afresh with what it was given.
pub const SPAWN_KEEPING_ENV: &[&str] = &[
    "spawn",
    "--env",
    "X=kept",
    "--",
    "sh",
    "-c",
    "echo $X > x.txt",
];

/// The ways `grove merge` merges: plainly, `--squash` and `--rebase`.
pub const MERGE_MODES: [Option<&str>; 3] = [None, Some("--squash"), Some("--rebase")];

/// `grove merge <id>` in `mode` (one of [`MERGE_MODES`]).
pub fn merge_in(g: &Grove, id: &str, mode: Option<&str>) -> Out {
    g.run(&[&["merge", id], mode.as_slice()].concat())
}

/// A grove with one worktree slot, taken by an agent that runs until the returned file
/// exists: later spawns queue behind it. Returns the grove, that agent and the file.
pub fn one_slot_held() -> (Grove, String, PathBuf) {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "1")]);
    let (holder, release) = g.spawn_gated(&[], "", "");
    (g, holder, release)
}

/// The elements of the array `value[key]`, which must be one.
pub fn each<'a>(value: &'a Value, key: &str) -> std::slice::Iter<'a, Value> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array `{key}` in {value}"))
        .iter()
}

/// Insists that `text` holds every needle.
pub fn assert_holds_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }
}

/// Insists that the check `check` of a doctor report has `status` and a message
/// holding `needle`.
pub fn assert_check_says(check: &Value, status: &str, needle: &str) {
    assert_eq!(check["status"], status, "{check}");
    let message = check["message"].as_str().unwrap_or("");
    assert!(message.contains(needle), "{check}");
}

/// Runs `command` (`what`, for messages), which must succeed; its stdout.
pub fn stdout_of(command: &mut Command, what: &str) -> String {
    let out = command.output().expect(what);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `command` with `input` on its stdin, then closed; its output.
pub fn output_fed(command: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("wait")
}

/// The JSON object a program printed, once it succeeded; its output otherwise.
pub fn json_printed(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

/// The ids of the agents `grove COMMAND ARGS --json` lists.
pub fn listed_ids(g: &Grove, command: &str, args: &[&str]) -> Vec<String> {
    listed_fields(g, &[command], args, "agents", "id")
}

/// The string `field` of each element of the array `key` that `grove --json COMMAND
/// ARGS` prints.
pub fn listed_fields(
    g: &Grove,
    command: &[&str],
    args: &[&str],
    key: &str,
    field: &str,
) -> Vec<String> {
    each(&g.json(&[command, args].concat()), key)
        .filter_map(|item| item[field].as_str().map(String::from))
        .collect()
}

/// A fresh directory under /tmp named `<prefix>…`, short because the sockets under it
/// must stay under 108 bytes.
pub fn short_temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// The environment of `g`'s commands, for other programs that run grove (examples).
pub fn grove_env(g: &Grove) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    g.command()
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect()
}

pub fn git_identity() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GIT_AUTHOR_NAME", "Test Author"),
        ("GIT_AUTHOR_EMAIL", "author@example.invalid"),
        ("GIT_COMMITTER_NAME", "Test Author"),
        ("GIT_COMMITTER_EMAIL", "author@example.invalid"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ]
}

pub fn git_in(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(git_identity())
        .env("HOME", dir)
        .output()
        .expect("running git");
    assert!(
        output.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether the repository at `dir` holds the object `id`.
pub fn has_object(dir: &Path, id: &str) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["cat-file", "-e", id])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("git cat-file")
        .success()
}

/// A repository at `path` with one commit on `main`: README.md and src/lib.txt.
pub fn init_repo(path: &Path) {
    fs::create_dir_all(path.join("src")).expect("mkdir repo");
    git_in(path, &["init", "-q", "-b", "main"]);
    fs::write(path.join("README.md"), "# test repo\n").expect("write");
    fs::write(path.join("src/lib.txt"), "one\ntwo\nthree\n").expect("write");
    fs::write(path.join(".gitignore"), "*.ignored\n").expect("write");
    git_in(path, &["add", "."]);
    git_in(path, &["commit", "-q", "-m", "initial"]);
}

/// Polls `condition` until it holds or `limit` passes; for facts no event announces
/// (a process vanished, a file appeared written by an agent).
pub fn eventually(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while `pid` runs: a zombie counts as gone once its last thread has exited (a
/// killed daemon's other threads may still hold its socket and lock for a moment).
pub fn process_exists(pid: i32) -> bool {
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return false;
    }
    let zombie = fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true);
    if !zombie {
        return true;
    }
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| tasks.count() > 1)
        .unwrap_or(false)
}

/// The pid a script wrote to `path`. A file a shell redirects into exists before the
/// pid is written to it: this waits (10 s at most) for one that parses.
pub fn read_pid(path: &Path) -> i32 {
    let parsed = || fs::read_to_string(path).ok()?.trim().parse().ok();
    eventually(
        &format!("a pid in {}", path.display()),
        Duration::from_secs(10),
        || parsed().is_some(),
    );
    parsed().expect("pid")
}

/// Whether a test that needs `capability` (root, cgroup2, landlock, tmpfs, python3,
/// python-mcp, another-user, ...) may run here. When `missing` says why it cannot: on a
/// laptop the test prints that and is skipped; where `GROVE_TEST_REQUIRE` names the
/// capability (or is `all`), as CI sets it, the test fails instead, because a test that
/// could not run must not pass.
pub fn can_run(capability: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    let required = std::env::var("GROVE_TEST_REQUIRE").unwrap_or_default();
    let required = required
        .split(',')
        .map(str::trim)
        .any(|c| c == "all" || c == capability);
    assert!(
        !required,
        "this test needs {capability}, which GROVE_TEST_REQUIRE requires, but: {why}"
    );
    eprintln!("skipping: needs {capability}: {why}");
    false
}

/// True when python3 runs here; otherwise [`can_run`] says why (and fails in CI).
pub fn have_python3() -> bool {
    have_program("python3", &["--version"])
}

/// True when `program` runs here (as `program probe`); otherwise [`can_run`] says why
/// (and fails in CI).
pub fn have_program(program: &str, probe: &[&str]) -> bool {
    let missing = Command::new(program)
        .args(probe)
        .output()
        .err()
        .map(|e| format!("cannot run {program}: {e}"));
    can_run(program, missing)
}

/// True when the kernel has the Landlock ABI the jail needs; otherwise [`can_run`]
/// says why (and fails in CI).
pub fn have_landlock() -> bool {
    use grove_agent_shim::jail::{kernel_abi, REQUIRED_ABI};
    let abi = kernel_abi();
    let missing = (abi < REQUIRED_ABI)
        .then(|| format!("the kernel's Landlock ABI is {abi}, the jail needs {REQUIRED_ABI}"));
    can_run("landlock", missing)
}

/// The spawn flags a behaviour is tested under: jailed and not, or only not where the
/// kernel cannot jail (which [`have_landlock`] reports).
pub fn jail_modes() -> &'static [&'static [&'static str]] {
    if have_landlock() {
        &[&["--jail"], &["--no-jail"]]
    } else {
        &[&["--no-jail"]]
    }
}

/// Where the cgroup2 hierarchy is mounted, if anywhere.
pub fn cgroup2_mount() -> Option<PathBuf> {
    grove_sys::proc::cgroup2_mount().map(|m| m.point)
}

/// The cgroup2 mount, when this process can make a cgroup below its own there (root,
/// or a delegated cgroup); otherwise [`can_run`] says why (and fails in CI).
pub fn writable_cgroup2() -> Option<PathBuf> {
    let why = match (cgroup2_mount(), grove_sys::proc::own_cgroup()) {
        (Some(mount), Some(own)) => {
            let probe = mount
                .join(own.trim_start_matches('/'))
                .join(format!("grove-test-probe-{}", std::process::id()));
            match fs::create_dir(&probe) {
                Ok(()) => {
                    let _ = fs::remove_dir(&probe);
                    return Some(mount);
                }
                Err(e) => format!("cannot make a cgroup ({}): {e}", probe.display()),
            }
        }
        (None, _) => "no cgroup2 mount".into(),
        (Some(_), None) => "this process's cgroup2 path is unknown".into(),
    };
    can_run("cgroup2", Some(why));
    None
}

/// The python of a virtualenv with the official MCP SDK (GROVE_MCP_PYTHON, which CI
/// sets); otherwise [`can_run`] says why (and fails in CI).
pub fn mcp_python() -> Option<String> {
    let missing = match std::env::var("GROVE_MCP_PYTHON") {
        Err(_) => "GROVE_MCP_PYTHON is not set (CI sets it to a virtualenv with `pip install mcp`)"
            .to_string(),
        Ok(python) => match Command::new(&python).args(["-c", "import mcp"]).status() {
            Ok(status) if status.success() => return Some(python),
            Ok(_) => format!("{python} cannot import mcp"),
            Err(e) => format!("cannot run {python}: {e}"),
        },
    };
    can_run("python-mcp", Some(missing));
    None
}

/// Every tool `grove mcp` lists, sorted: the MCP tests check the server against it.
#[allow(dead_code)]
pub const MCP_TOOLS: &[&str] = &[
    "agent_diff",
    "agent_logs",
    "agent_status",
    "answer_agent",
    "discard_agent",
    "kill_agent",
    "list_agents",
    "merge_agent",
    "overlaps",
    "read_screen",
    "report_agent",
    "review_agents",
    "send_input",
    "session_list",
    "session_show",
    "spawn_agent",
    "state_fork",
    "state_get",
    "state_history",
    "state_update",
    "wait_agents",
];

/// The `tools` names of an MCP client script's JSON report.
#[allow(dead_code)]
pub fn tool_names(report: &Value) -> Vec<&str> {
    report["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The sum of every series of the metric `name` in `grove metrics`.
pub fn metric_sum(g: &Grove, name: &str) -> f64 {
    let metrics = g.json(&["metrics"]);
    let metric = each(&metrics, "metrics")
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
        .clone();
    each(&metric, "series")
        .filter_map(|s| s["value"].as_f64())
        .sum()
}

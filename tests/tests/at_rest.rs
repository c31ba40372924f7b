//! The socket, the files at rest, the agent's environment and the server under abuse
//! (issue 14 items 9 and 11): each guarantee tried as an attacker would.

mod support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::*;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn need_root() -> bool {
    can_run(
        "root",
        (!is_root()).then(|| "not running as root".to_string()),
    )
}

fn need_python() -> bool {
    have_python3()
}

/// A second user of this machine, made for one test with `useradd` and removed with
/// its group when dropped, even when the test fails: the run leaves no account behind.
struct OtherUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl OtherUser {
    /// `None` when it cannot be made here ([`can_run`] says why, and fails in CI).
    fn create() -> Option<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // One name per test: tests run in parallel, and each removes its own.
        let name = format!(
            "grove-t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let made = Command::new("useradd")
            .args(["--system", "--no-create-home", "--user-group"])
            .args(["--shell", "/bin/false", &name])
            .output();
        let why = match made {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "useradd failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Some(format!("cannot run useradd: {e}")),
        };
        if !can_run("another-user", why) {
            return None;
        }
        let user = nix::unistd::User::from_name(&name)
            .ok()
            .flatten()
            .expect("the user just made");
        Some(Self {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            name,
        })
    }

    /// What of the user is still on this machine.
    fn left_behind(&self) -> Vec<String> {
        let mut left = Vec::new();
        if nix::unistd::User::from_name(&self.name)
            .ok()
            .flatten()
            .is_some()
        {
            left.push(format!("user {}", self.name));
        }
        if nix::unistd::Group::from_name(&self.name)
            .ok()
            .flatten()
            .is_some()
        {
            left.push(format!("group {}", self.name));
        }
        for dir in ["/home", "/var/mail", "/var/spool/mail"] {
            let path = Path::new(dir).join(&self.name);
            if path.exists() {
                left.push(path.display().to_string());
            }
        }
        left
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let removed = Command::new("userdel").arg(&self.name).output();
        let mut left = self.left_behind();
        if let Ok(out) = &removed {
            if !out.status.success() {
                left.push(format!("userdel: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        // A second panic while the test's own unwinds would abort the run and hide it.
        if std::thread::panicking() {
            if !left.is_empty() {
                eprintln!("left on this machine: {left:?}");
            }
            return;
        }
        assert!(left.is_empty(), "left on this machine: {left:?}");
    }
}

/// A child process killed when dropped: one still running as [`OtherUser`] would keep
/// `userdel` from removing it.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn make_dir(path: &Path, mode: u32) {
    fs::create_dir_all(path).expect("mkdir");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Every regular file beneath `dir` (symlinks not followed) that contains `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                let bytes = fs::read(entry.path()).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(entry.path());
                }
            }
        }
    }
    found
}

fn assert_nothing_refused_left_behind(g: &Grove) {
    assert!(
        !g.home.join("daemon.log").exists(),
        "a refused daemon wrote its log"
    );
    assert!(!g.home.join("grove.sock").exists(), "a socket was made");
    assert!(!g.home.join("grove.db").exists(), "a database was made");
    assert!(!g.home.join("start.lock").exists(), "a lock was made");
}

#[test]
fn a_socket_dir_others_may_write_is_refused_by_client_and_daemon() {
    let g = Grove::new();
    make_dir(&g.home, 0o777);
    g.fails(&["list"], &["mode 0777", "chmod 700"]);
    g.fails(&["daemon", "run"], &["chmod 700"]);
    // doctor says the same, and fails, and changes nothing either.
    let doctor = g.run(&["doctor"]);
    assert_eq!(doctor.code, 1, "{}", doctor.stdout);
    let socket_line = doctor
        .stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("socket"))
        .unwrap_or_default()
        .to_string();
    assert!(
        socket_line.contains("chmod 700") && socket_line.contains("777"),
        "{}",
        doctor.stdout
    );
    assert_nothing_refused_left_behind(&g);
    assert_eq!(
        mode(&g.home),
        0o777,
        "a refused directory is left as it was"
    );
}

#[test]
fn a_socket_dir_that_is_a_symlink_is_refused() {
    let g = Grove::new();
    let real = g.dir.path().join("real");
    make_dir(&real, 0o700);
    std::os::unix::fs::symlink(&real, &g.home).expect("symlink");
    g.fails(&["list"], &["symbolic link"]);
    assert!(fs::read_dir(&real).expect("real").next().is_none());
}

#[test]
fn a_socket_dir_of_another_user_is_refused_by_client_and_daemon() {
    if !need_root() {
        return;
    }
    let Some(user) = OtherUser::create() else {
        return;
    };
    let (uid, gid) = (user.uid, user.gid);
    let g = Grove::new();
    make_dir(&g.home, 0o700);
    nix::unistd::chown(
        &g.home,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .expect("chown");
    g.fails(&["list"], &[&format!("belongs to uid {uid}")]);
    g.fails(&["daemon", "run"], &[&format!("belongs to uid {uid}")]);
    assert_nothing_refused_left_behind(&g);
}

/// The attacker: a server listening as another user on grove's socket path (bound
/// there by root, which then drops to that user before `listen`, so that the kernel
/// records that user as the server). It prints how many bytes its client sent.
const FAKE_SERVER: &str = r#"
import os, socket, sys
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
os.setgid(gid)
os.setuid(uid)
s.listen(8)
print("listening", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(10)
got = b""
try:
    while True:
        chunk = c.recv(65536)
        if not chunk:
            break
        got += chunk
except socket.timeout:
    pass
print("read", len(got), flush=True)
"#;

#[test]
fn a_server_run_by_another_user_gets_nothing_from_the_client() {
    if !need_root() || !need_python() {
        return;
    }
    let Some(user) = OtherUser::create() else {
        return;
    };
    let (uid, gid) = (user.uid, user.gid);
    let g = Grove::new();
    make_dir(&g.home, 0o700);
    let socket = g.home.join("grove.sock");
    let mut server = Killed(
        Command::new("python3")
            .args(["-c", FAKE_SERVER])
            .arg(&socket)
            .arg(uid.to_string())
            .arg(gid.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3"),
    );
    let mut lines = BufReader::new(server.0.stdout.take().expect("stdout")).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("listening")
    );
    let out = g.run_env(&["spawn", "--env", "SECRET=hunter2", "--", "true"], &[]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!("served by uid {uid}"))
            && out.stderr.contains("nothing was sent"),
        "{}",
        out.stderr
    );
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("read 0"),
        "the impostor read bytes from the client"
    );
    let _ = server.0.wait();
}

#[test]
fn a_home_that_existed_open_ends_up_0700_with_0600_files() {
    let g = Grove::new();
    make_dir(&g.home, 0o755);
    make_dir(&g.home.join("agents"), 0o755);
    for name in ["grove.db", "daemon.log", "notes.txt"] {
        let path = g.home.join(name);
        fs::write(&path, "").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let id = g.spawn(&[], "echo hi > file.txt");
    g.wait(&id);
    assert_eq!(mode(&g.home), 0o700);
    assert_eq!(mode(&g.home.join("agents")), 0o700);
    let mut checked = Vec::new();
    for entry in fs::read_dir(&g.home).expect("home").flatten() {
        let kind = entry.file_type().expect("type");
        if kind.is_file() {
            assert_eq!(mode(&entry.path()), 0o600, "{}", entry.path().display());
            checked.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    for name in ["grove.db", "grove.db-wal", "daemon.log", "daemon.lock"] {
        assert!(checked.iter().any(|c| c == name), "{name} in {checked:?}");
    }
    assert_eq!(mode(&g.home.join("grove.sock")) & 0o077, 0);
}

/// A value no file under GROVE_HOME may hold once its agent started.
fn secret_value() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("s3cret-{}-{nanos}", std::process::id())
}

/// An agent script that exits 7 unless SECRET holds what `expected` holds, then marks
/// `started` in its worktree and waits for `stop` (the value never appears in argv).
fn secret_checking_script(expected: &Path, stop: &Path) -> String {
    format!(
        "[ \"$SECRET\" = \"$(cat {})\" ] || exit 7; touch started; \
         while [ ! -e {} ]; do sleep 0.05; done",
        expected.display(),
        stop.display()
    )
}

fn assert_no_file_holds(g: &Grove, secret: &str, when: &str) {
    let found = files_containing(&g.home, secret.as_bytes());
    assert!(found.is_empty(), "{when}: the --env value is in {found:?}");
}

#[test]
fn an_env_value_is_gone_from_disk_once_its_agent_started() {
    let g = Grove::new();
    let secret = secret_value();
    let expected = g.dir.path().join("expected");
    let stop = g.dir.path().join("stop");
    fs::write(&expected, &secret).expect("write");
    let env = format!("SECRET={secret}");
    let id = g.spawn(&["--env", &env], &secret_checking_script(&expected, &stop));
    let worktree = PathBuf::from(g.record(&id)["worktree"].as_str().expect("worktree"));
    eventually("the agent saw its secret", Duration::from_secs(20), || {
        worktree.join("started").exists()
    });
    // The agent may run a moment before the daemon hears of its start and deletes the
    // value: gone within a second, while the agent still runs.
    eventually(
        "the value is gone while the agent runs",
        Duration::from_secs(1),
        || files_containing(&g.home, secret.as_bytes()).is_empty(),
    );
    assert_eq!(g.status(&id), "running");
    fs::write(&stop, "").expect("stop");
    let record = g.wait(&id);
    assert_eq!(record["exit_code"], 0, "{record}");
    assert_no_file_holds(&g, &secret, "ended");
    g.ok(&["daemon", "stop"]);
    assert_no_file_holds(&g, &secret, "daemon stopped");
}

#[test]
fn a_queued_agent_gets_its_env_after_a_daemon_crash_and_then_it_is_gone() {
    let (g, first, hold) = one_slot_held();
    let secret = secret_value();
    let expected = g.dir.path().join("expected");
    let stop = g.dir.path().join("stop");
    fs::write(&expected, &secret).expect("write");
    fs::write(&stop, "").expect("no wait");
    let env = format!("SECRET={secret}");
    let queued = g.spawn(&["--env", &env], &secret_checking_script(&expected, &stop));
    assert_eq!(g.status(&queued), "queued");
    g.crash_daemon();
    g.ok(&["list"]);
    assert_eq!(g.status(&queued), "queued");
    fs::write(&hold, "").expect("release");
    assert_eq!(g.wait(&first)["exit_code"], 0);
    let record = g.wait(&queued);
    assert_eq!(
        record["exit_code"], 0,
        "the queued agent did not get its secret: {record}"
    );
    assert_no_file_holds(&g, &secret, "started after the crash");
    g.ok(&["daemon", "stop"]);
    assert_no_file_holds(&g, &secret, "daemon stopped");
}

/// `env` of an agent, as the lines it wrote to `out`.
fn agent_env(g: &Grove, out: &Path, extra: &[&str], caller: &[(&str, &str)]) -> Vec<String> {
    let mut args = vec!["spawn"];
    args.extend_from_slice(extra);
    let script = format!("env > {}", out.display());
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let spawned = g.run_env(&args, caller);
    assert_eq!(spawned.code, 0, "{}", spawned.stderr);
    let id = spawned.stdout.trim().to_string();
    assert_eq!(g.wait(&id)["exit_code"], 0);
    fs::read_to_string(out)
        .expect("agent env")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Starts `g`'s daemon from a shell that has a secret of its own, `SECRET_DAEMON`.
fn start_daemon_with_a_secret(g: &Grove) {
    let started = g.run_env(&["list"], &[("SECRET_DAEMON", "x")]);
    assert_eq!(started.code, 0, "{}", started.stderr);
}

#[test]
fn an_agent_gets_its_callers_environment_never_the_daemons() {
    let g = Grove::new().with_env(&[("GROVE_ENV_ALLOW", "ALLOWED_VAR")]);
    start_daemon_with_a_secret(&g);
    let bin = g.dir.path().join("bin");
    make_dir(&bin, 0o755);
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = g.dir.path().join("env.out");
    let env = agent_env(
        &g,
        &out,
        &[],
        &[("PATH", &path), ("CALLER_ONLY", "yes"), ("GIT_DIR", "/x")],
    );
    assert!(
        !env.iter().any(|l| l.starts_with("SECRET_DAEMON=")),
        "{env:?}"
    );
    assert!(env.contains(&format!("PATH={path}")), "{env:?}");
    assert!(env.contains(&"CALLER_ONLY=yes".to_string()), "{env:?}");
    assert!(!env.iter().any(|l| l.starts_with("GIT_DIR=")), "{env:?}");
    assert!(
        env.iter().any(|l| l.starts_with("GROVE_AGENT_ID=")),
        "{env:?}"
    );

    let out = g.dir.path().join("env-clear.out");
    let env = agent_env(
        &g,
        &out,
        &["--env-clear", "--env-keep", "KEEP_ME", "--env", "GIVEN=1"],
        &[
            ("CALLER_ONLY", "yes"),
            ("KEEP_ME", "kept"),
            ("ALLOWED_VAR", "allowed"),
        ],
    );
    assert!(
        !env.iter().any(|l| l.starts_with("CALLER_ONLY=")),
        "{env:?}"
    );
    for wanted in ["KEEP_ME=kept", "GIVEN=1", "ALLOWED_VAR=allowed"] {
        assert!(env.contains(&wanted.to_string()), "{wanted}: {env:?}");
    }
    assert!(env.iter().any(|l| l.starts_with("PATH=")), "{env:?}");
}

#[test]
fn a_raw_socket_spawn_gets_a_minimal_environment() {
    let g = Grove::new();
    start_daemon_with_a_secret(&g);
    let out = g.dir.path().join("env.out");
    let mut c = client(&g);
    let script = format!("env > {}", out.display());
    let spawned = call(
        &mut c,
        "agent.spawn",
        serde_json::json!({"argv": ["sh", "-c", script], "repo": g.repo}),
    )
    .expect("spawn");
    g.wait(spawned["id"].as_str().expect("id"));
    let env = fs::read_to_string(&out).expect("agent env");
    assert!(!env.contains("SECRET_DAEMON"), "{env}");
    assert!(
        env.lines()
            .any(|l| l == "PATH=/usr/local/bin:/usr/bin:/bin"),
        "{env}"
    );
}

/// The attacker: opens `count` connections to the socket and holds them, idle, for
/// `hold` seconds. Prints how many it got once it has them all.
const IDLE_FLOOD: &str = r#"
import os, resource, socket, sys, time
path, count, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, count + 64), max(hard, count + 64)))
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
        held.append(s)
    except OSError:
        s.close()
print("opened", len(held), flush=True)
time.sleep(hold)
"#;

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // After the command name: field 3 is [0]; utime is field 14, stime 15.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[test]
fn idle_connections_beyond_the_fd_limit_do_not_spin_the_daemon() {
    if !need_python() {
        return;
    }
    let g = Grove::new();
    // The daemon inherits the limit of the command that starts it.
    let started = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -n 256 && exec {} list", g.bin.display()),
        ])
        .envs(grove_env(&g))
        .current_dir(&g.repo)
        .output()
        .expect("sh");
    assert!(started.status.success(), "{started:?}");
    let pid = g.daemon_pid();
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(" 256 ")),
        "{limits}"
    );
    let mut flood = Command::new("python3")
        .args(["-c", IDLE_FLOOD])
        .arg(g.home.join("grove.sock"))
        .args(["2000", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut opened = String::new();
    BufReader::new(flood.stdout.take().expect("stdout"))
        .read_line(&mut opened)
        .expect("opened");
    let before = cpu_ticks(pid);
    let count: usize = opened
        .trim()
        .strip_prefix("opened ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{opened}"));
    assert!(count > 256, "only {count} connections: no pressure");
    // The flood holds its connections for a few seconds, then exits.
    assert!(flood.wait().expect("wait").success());
    let used = cpu_ticks(pid) - before;
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    assert!(
        used < tick / 2,
        "the daemon used {used} ticks of CPU ({tick}/s) in a few idle seconds"
    );
    eventually("the daemon answers again", Duration::from_secs(30), || {
        g.run(&["list"]).code == 0
    });
    let log = g.home.join("daemon.log");
    let size = fs::metadata(&log).expect("daemon.log exists").len();
    assert!(size < 2 << 20, "daemon.log is {size} bytes");
    let warnings = g.daemon_log_lines("accept failed").len();
    assert!(
        (1..=4).contains(&warnings),
        "{warnings} accept warnings: {:?}",
        g.daemon_log_lines("accept failed")
    );
}

#[test]
fn connections_over_the_cap_get_one_error_line_and_are_closed() {
    let g = Grove::new().with_env(&[("GROVE_MAX_CONNECTIONS", "4")]);
    g.ok(&["list"]);
    let held_now = std::cell::RefCell::new(Vec::new());
    let socket = g.home.join("grove.sock");
    // Each held connection is served (its hello answered) before the next is made: a
    // slot of the `list` above may still be held for a moment after that client left,
    // and a held connection turned away for it would leave room for the `list` below.
    let held: Vec<UnixStream> = (0..4)
        .map(|_| {
            eventually("a connection is served", Duration::from_secs(10), || {
                let mut stream = UnixStream::connect(&socket).expect("connect");
                stream
                    .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"protocol\":1}}\n")
                    .expect("hello");
                let mut line = String::new();
                let _ = std::io::BufRead::read_line(
                    &mut std::io::BufReader::new(&stream),
                    &mut line,
                );
                let served = line.contains("daemon_version");
                if served {
                    held_now.borrow_mut().push(stream);
                }
                served
            });
            held_now.borrow_mut().pop().expect("served")
        })
        .collect();
    eventually(
        "a fifth connection is turned away",
        Duration::from_secs(10),
        || {
            let mut extra = UnixStream::connect(&socket).expect("connect");
            extra
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut answer = String::new();
            let _ = extra.read_to_string(&mut answer);
            answer.contains("max_connections") && answer.lines().count() == 1
        },
    );
    // Told not to retry, `grove` says why; by default it waits for a slot.
    let refused = g.run_env(&["list"], &[("GROVE_RETRY_FOR", "0")]);
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("max_connections"),
        "{}",
        refused.stderr
    );
    let mut list = g.command();
    list.arg("list");
    let waiting = std::thread::spawn(move || list.output().expect("run grove"));
    drop(held);
    let listed = waiting.join().expect("list");
    assert!(listed.status.success(), "{listed:?}");
}

#[test]
fn the_command_is_looked_up_on_the_callers_path_at_spawn() {
    let g = Grove::new();
    let bin = g.dir.path().join("bin");
    make_dir(&bin, 0o755);
    let tool = bin.join("caller-tool");
    fs::write(&tool, "#!/bin/sh\necho from the callers PATH\n").expect("write");
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let spawned = g.run_env(&["spawn", "--", "caller-tool"], &[("PATH", &path)]);
    assert_eq!(spawned.code, 0, "{}", spawned.stderr);
    let record = g.wait(spawned.stdout.trim());
    assert_eq!(record["exit_code"], 0, "{record}");
    // Not on the caller's PATH: refused at once, nothing registered.
    let refused = g.run_env(
        &["spawn", "--", "caller-tool"],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains("command not found: caller-tool; PATH searched: /usr/bin:/bin"),
        "{}",
        refused.stderr
    );
    // `--env PATH=...` is the PATH the agent gets, so it is the one searched.
    let env = format!("PATH={path}");
    let given = g.run_env(
        &["spawn", "--env", &env, "--", "caller-tool"],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_eq!(given.code, 0, "{}", given.stderr);
    g.wait(given.stdout.trim());
    assert_eq!(g.all_agents().len(), 2);
}

#[test]
fn an_agent_spawned_through_grove_mcp_gets_the_mcp_servers_environment() {
    use std::io::Write;
    let g = Grove::new();
    start_daemon_with_a_secret(&g);
    let out = g.dir.path().join("env.out");
    let mut mcp = g
        .command()
        .arg("mcp")
        .env("MCP_CALLER", "yes")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("grove mcp");
    let mut stdin = mcp.stdin.take().expect("stdin");
    let script = format!("env > {}", out.display());
    let messages = [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "at_rest", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "spawn_agent", "arguments": {"argv": ["sh", "-c", script]}}}),
    ];
    for message in &messages {
        writeln!(stdin, "{message}").expect("write");
    }
    let lines = BufReader::new(mcp.stdout.take().expect("stdout")).lines();
    let answer = lines
        .map_while(Result::ok)
        .find(|l| l.contains(r#""id":2"#))
        .expect("an answer to tools/call");
    drop(stdin);
    let _ = mcp.wait();
    assert!(!answer.contains(r#""isError":true"#), "{answer}");
    eventually("the agent wrote its env", Duration::from_secs(20), || {
        fs::read_to_string(&out).is_ok_and(|e| e.contains("GROVE_AGENT_ID="))
    });
    let env = fs::read_to_string(&out).expect("env");
    assert!(env.lines().any(|l| l == "MCP_CALLER=yes"), "{env}");
    assert!(!env.contains("SECRET_DAEMON"), "{env}");
}

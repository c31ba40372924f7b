//! Isolation and limits through the real binary: the Landlock write jail (`--jail`),
//! rlimits, the private TMPDIR, the agent's cgroup, and CPU and memory accounting.

mod support;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;
use support::*;

/// What the jail tests' agent tries; each line of its log says how it went.
const TRIES: &str = r#"
    echo x > "$OUTSIDE" && echo outside-written
    echo x > "$MAIN/intruder.txt" && echo main-written
    s=/var/tmp/grove-intruder-$$; echo x > "$s" && echo scratch-written && rm -f "$s"
    echo hi > new.txt && git add new.txt && git commit -qm 'jailed commit' && echo committed
    echo t > "$TMPDIR/t" && echo "tmp-written $TMPDIR"
    echo y > /dev/null && echo devnull-written
    "$GROVE_BIN" state get > /dev/null && echo daemon-reachable
    exit 0
"#;

fn tries_env(g: &Grove) -> Vec<String> {
    vec![
        "--env".into(),
        format!("OUTSIDE={}", outside(g).display()),
        "--env".into(),
        format!("MAIN={}", g.repo.display()),
        "--env".into(),
        format!("GROVE_BIN={BIN}"),
    ]
}

fn outside(g: &Grove) -> PathBuf {
    g.dir.path().join("outside.txt")
}

fn spawn_tries(g: &Grove, extra: &[&str]) -> (String, Value, String) {
    let env = tries_env(g);
    let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let id = g.spawn(&args, TRIES);
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    (id, record, log)
}

#[test]
fn jail_confines_writes_to_the_worktree_and_git_can_still_commit() {
    let g = Grove::new();
    let (id, record, log) = spawn_tries(&g, &["--jail"]);
    assert_eq!(record["outcome"], "succeeded", "{log}");
    assert_eq!(record["jail"], true);

    // Below $HOME (the user's file, the main checkout): $HOME is the agent's private
    // home, so a write there lands in that copy, never in the user's files.
    assert!(!outside(&g).exists());
    assert!(!g.repo.join("intruder.txt").exists());
    // Elsewhere the jail refuses, even where the view has a writable-looking tmpfs.
    assert!(!log.contains("scratch-written"), "{log}");
    assert!(log.contains("Permission denied"), "{log}");

    // Inside: git add && git commit from the worktree, onto the agent's branch.
    assert!(log.contains("committed"), "{log}");
    g.assert_one_commit_on_branch(&id, "jailed commit", "new.txt", "hi\n");
    assert_eq!(record["salvaged"], false);
    g.git(&["fsck", "--strict"]);

    // A private TMPDIR, writable, and gone once the agent is.
    let tmp = g.home.join("agents").join(&id).join("tmp");
    assert!(
        log.contains(&format!("tmp-written {}", tmp.display())),
        "{log}"
    );
    assert!(!tmp.exists(), "{} outlived the agent", tmp.display());
    assert!(log.contains("devnull-written"), "{log}");
    // The daemon's socket (a path) stays reachable: grove works from inside the jail.
    assert!(log.contains("daemon-reachable"), "{log}");
    let shown = g.ok(&["show", &id]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("jail ") && l.contains("yes")),
        "{shown}"
    );
}

#[test]
fn without_jail_the_same_writes_succeed() {
    let g = Grove::new();
    let (id, record, log) = spawn_tries(&g, &[]);
    assert_eq!(record["outcome"], "succeeded", "{log}");
    assert_eq!(record["jail"], false);
    assert!(log.contains("outside-written"), "{log}");
    assert_eq!(fs::read_to_string(outside(&g)).ok().as_deref(), Some("x\n"));
    assert!(log.contains("main-written"), "{log}");
    assert!(log.contains("scratch-written"), "{log}");
    assert!(log.contains("committed"), "{log}");
    // Unjailed agents get a private TMPDIR too.
    let tmp = g.home.join("agents").join(&id).join("tmp");
    assert!(
        log.contains(&format!("tmp-written {}", tmp.display())),
        "{log}"
    );
    assert!(!tmp.exists());
}

#[test]
fn jail_setting_makes_jail_the_default_and_no_jail_overrides_it() {
    let g = Grove::new().with_env(&[("GROVE_JAIL", "true")]);
    let (_, record, log) = spawn_tries(&g, &[]);
    assert_eq!(record["jail"], true);
    assert!(!outside(&g).exists(), "{log}");
    assert!(log.contains("committed"), "{log}");

    let (_, record, log) = spawn_tries(&g, &["--no-jail"]);
    assert_eq!(record["jail"], false);
    assert!(log.contains("outside-written"), "{log}");
}

/// Spawns `script` jailed, with the flags `more` and the directory `dir` open for
/// writing, named in `$var`; the agent's id.
fn spawn_jailed_writing(g: &Grove, dir: &Path, var: &str, more: &[&str], script: &str) -> String {
    let dir = dir.display().to_string();
    let env = format!("{var}={dir}");
    g.spawn(
        &[&["--jail", "--jail-write", &dir, "--env", &env], more].concat(),
        script,
    )
}

#[test]
fn jail_write_opens_one_more_path() {
    let g = Grove::new();
    let cache = g.make_dir("cache");
    let id = spawn_jailed_writing(
        &g,
        &cache,
        "CACHE",
        &["--env", &format!("OUTSIDE={}", outside(&g).display())],
        r#"echo kept > "$CACHE/entry"; echo x > "$OUTSIDE"; exit 0"#,
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded");
    assert_eq!(
        fs::read_to_string(cache.join("entry")).ok().as_deref(),
        Some("kept\n")
    );
    assert!(!outside(&g).exists());
    assert_eq!(
        record["jail_write"][0],
        cache.display().to_string().as_str()
    );

    // Without --jail, --jail-write is a mistake, and said to be one.
    g.refused(&["spawn", "--jail-write", "cache", "--", "true"], "--jail");
}

#[test]
fn jailed_agent_cannot_signal_processes_outside_but_can_its_own() {
    let g = Grove::new();
    let mut victim = Victim::start();
    let id = g.spawn(
        &["--jail", "--env", &format!("VICTIM={}", victim.pid())],
        r#"kill -TERM "$VICTIM"; echo "outside-kill=$?"
           sleep 300 & own=$!
           kill -TERM "$own"; echo "own-kill=$?"
           wait "$own"; exit 0"#,
    );
    let log = g.succeeded_log(&id);
    assert!(!log.contains("outside-kill=0"), "{log}");
    assert!(log.contains("outside-kill="), "{log}");
    assert!(log.contains("own-kill=0"), "{log}");
    assert!(victim.alive(), "the jailed agent killed a process outside");

    // The control: unjailed, the same kill lands.
    let id = g.spawn(
        &["--env", &format!("VICTIM={}", victim.pid())],
        r#"kill -TERM "$VICTIM"; echo "outside-kill=$?""#,
    );
    g.wait(&id);
    assert!(g.ok(&["logs", &id]).contains("outside-kill=0"));
    eventually("victim killed", Duration::from_secs(10), || !victim.alive());
}

#[test]
#[cfg(target_os = "linux")] // abstract sockets are Linux's
fn jailed_agent_cannot_reach_abstract_sockets_outside() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let g = Grove::new();
    let name = format!("grove-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let _listener = UnixListener::bind_addr(&addr).expect("bind abstract socket");
    let script = r#"python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + sys.argv[1])
    print("connected")
except OSError as e:
    print("refused:", e)
' "$NAME""#;
    let mut outputs = Vec::new();
    for extra in [&["--jail"][..], &[][..]] {
        let mut args = extra.to_vec();
        let env = format!("NAME={name}");
        args.extend_from_slice(&["--env", &env]);
        let id = g.spawn(&args, script);
        assert_eq!(g.wait(&id)["outcome"], "succeeded");
        outputs.push(g.ok(&["logs", &id]));
    }
    assert!(outputs[0].contains("refused:"), "jailed: {}", outputs[0]);
    assert!(outputs[1].contains("connected"), "unjailed: {}", outputs[1]);
}

#[test]
fn jail_is_refused_clearly_where_the_kernel_lacks_landlock() {
    for (abi, says) in [
        ("0", "has no Landlock"),
        ("5", "offers only Landlock ABI 5"),
    ] {
        let g = Grove::new().with_env(&[("GROVE_TEST_LANDLOCK_ABI", abi)]);
        let out = g.run(&["spawn", "--jail", "--", "true"]);
        assert_eq!(out.code, 4, "{}", out.stderr);
        assert!(out.stderr.contains("Landlock ABI 6"), "{}", out.stderr);
        assert!(out.stderr.contains(says), "{}", out.stderr);
        // Nothing was left behind, and unjailed agents still run.
        assert!(g.worktree_dirs().is_empty());
        assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
        let id = g.spawn(&[], "true");
        assert_eq!(g.wait(&id)["outcome"], "succeeded");
    }
    // `jail = true` in the configuration is refused the same way, never run unjailed.
    let g = Grove::new().with_env(&[("GROVE_TEST_LANDLOCK_ABI", "0"), ("GROVE_JAIL", "1")]);
    let out = g.run(&["spawn", "--", "true"]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("--no-jail"), "{}", out.stderr);
    let id = g.spawn(&["--no-jail"], "true");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
}

#[test]
fn max_files_sets_the_open_file_limit() {
    let g = Grove::new();
    let id = g.spawn(&["--max-files", "16"], "ulimit -n");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert_eq!(g.ok(&["logs", &id]).trim(), "16");
}

#[test]
fn memory_limit_stops_an_allocation_beyond_it() {
    let g = Grove::new();
    let id = g.spawn(
        &["--memory", "200M"],
        r#"python3 -c 'b = bytearray(8 << 20); print("8M fits")' || exit 10
           python3 -c 'b = bytearray(1 << 30); print("1G fits")'"#,
    );
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert!(log.contains("8M fits"), "{log}");
    assert!(log.contains("MemoryError"), "{log}");
    assert!(!log.contains("1G fits"), "{log}");
    assert_eq!(record["outcome"], "failed");
    assert_eq!(record["exit_code"], 1);
    assert_eq!(record["limits"]["memory_bytes"], 200 << 20);
}

#[test]
fn cpu_time_limit_kills_a_busy_loop_and_show_reports_the_cpu_used() {
    let g = Grove::new();
    let id = g.spawn(&["--cpu-time", "1"], "while :; do :; done");
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "failed");
    let signal = record["exit_signal"].as_i64();
    assert!(
        signal == Some(libc::SIGXCPU as i64) || signal == Some(libc::SIGKILL as i64),
        "{record}"
    );
    let cpu_ms = record["cpu_ms"].as_u64().expect("cpu_ms");
    // The kernel enforces RLIMIT_CPU on tick-sampled CPU time, which a loaded machine
    // over-charges; `cpu_ms` is the cgroup's exact figure (CI saw 821 ms at load 13).
    assert!((500..10_000).contains(&cpu_ms), "cpu_ms {cpu_ms}");
    assert!(record["peak_memory_bytes"].as_u64().expect("peak memory") > 0);
    let shown = g.ok(&["show", &id]);
    assert!(shown.contains("cpu time"), "{shown}");
    assert!(shown.contains("peak memory"), "{shown}");
    assert!(shown.contains("cpu 1s"), "{shown}");
}

#[test]
fn config_defaults_apply_when_flags_are_absent() {
    let g = Grove::new();
    g.write_config("max_files = 32\ntimeout = \"2s\"\nmemory = \"1G\"\ncpu_time = 60\n");
    let id = g.spawn(&[], "ulimit -n");
    let record = g.wait(&id);
    assert_eq!(g.ok(&["logs", &id]).trim(), "32");
    assert_eq!(record["limits"]["max_files"], 32);
    assert_eq!(record["limits"]["memory_bytes"], 1u64 << 30);
    assert_eq!(record["limits"]["cpu_seconds"], 60);
    assert_eq!(record["timeout_ms"], 2000);
    // Flags win over the defaults.
    let id = g.spawn(&["--max-files", "16", "--timeout", "1m"], "ulimit -n");
    let record = g.wait(&id);
    assert_eq!(g.ok(&["logs", &id]).trim(), "16");
    assert_eq!(record["timeout_ms"], 60_000);
    // The default timeout applies.
    let id = g.spawn(&[], "sleep 60");
    assert_eq!(g.wait(&id)["outcome"], "timed_out");
}

#[test]
fn each_agent_runs_in_a_cgroup_of_its_own_that_goes_away_with_it() {
    let Some(mount) = writable_cgroup2() else {
        return;
    };
    // Born inside (clone3), and the way of kernels before 5.7: joined between fork
    // and exec.
    for joining in [false, true] {
        let g = match joining {
            false => Grove::new(),
            true => Grove::new().with_env(&[("GROVE_TEST_CGROUP_BY_JOINING", "1")]),
        };
        let id = g.spawn(&[], "cat /proc/self/cgroup; sleep 0.1 & wait");
        let record = g.wait(&id);
        let log = g.ok(&["logs", &id]);
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_else(|| panic!("no cgroup v2 line (joining: {joining}): {log}"));
        assert!(line.ends_with(&format!("/grove/{id}")), "{line}");
        let dir = mount.join(line.trim_start_matches('/'));
        assert!(!dir.exists(), "{} outlived the agent", dir.display());
        assert!(record["cpu_ms"].is_u64(), "{record}");
        // A command that cannot start is told apart from one that failed, either way.
        let mut c = support::client(&g);
        let params = serde_json::json!({"argv": ["./no-such-program"], "repo": g.repo});
        let spawned = support::call(&mut c, "agent.spawn", params).expect("spawn");
        let record = g.wait(spawned["id"].as_str().expect("id"));
        assert_eq!(record["exit_code"], 127, "{record}");
        let log = g.ok(&["logs", spawned["id"].as_str().expect("id")]);
        assert!(
            log.contains("cannot run `./no-such-program`: command not found"),
            "{log}"
        );
    }

    // With cgroups off, the agent stays in the daemon's cgroup.
    let g = Grove::new().with_env(&[("GROVE_CGROUP", "false")]);
    let id = g.spawn(&[], "cat /proc/self/cgroup");
    let record = g.wait(&id);
    assert!(!g.ok(&["logs", &id]).contains("/grove/"));
    assert!(record["cpu_ms"].is_u64(), "{record}");
}

#[test]
fn kill_stops_escaped_descendants_with_and_without_a_cgroup() {
    // A jailed agent sees pids of its own namespace: its victims are found from
    // outside by a command line no other process has.
    let marker = format!("300.{}", std::process::id());
    for cgroup in ["true", "false"] {
        let g = Grove::new().with_env(&[("GROVE_CGROUP", cgroup)]);
        let pids = g.make_dir("pids");
        let id = spawn_jailed_writing(
            &g,
            &pids,
            "PIDS",
            &["--env", &format!("MARKER={marker}")],
            r#"setsid sh -c 'sleep "$MARKER" & echo $! > "$PIDS/escaped"; wait' &
               (sh -c 'trap "" TERM; sleep "$MARKER" & echo $! > "$PIDS/orphan"' &)
               wait"#,
        );
        for name in ["escaped", "orphan"] {
            let path = pids.join(name);
            eventually(name, Duration::from_secs(10), || {
                fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
            });
        }
        // A pid is written right after the fork: its exec of sleep may come a moment later.
        let mut victims = Vec::new();
        eventually("both victims run sleep", Duration::from_secs(10), || {
            victims = processes_running(&["sleep", &marker]);
            victims.len() == 2
        });
        let killed = g.json(&["kill", &id]);
        assert_eq!(killed["outcome"], "killed");
        for pid in victims {
            assert!(!process_exists(pid), "pid {pid} survived (cgroup {cgroup})");
        }
    }
}

/// The pids of the processes whose command line is `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

/// A process outside every agent, for agents to try to kill.
struct Victim(Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            Command::new("sleep")
                .arg("300")
                .spawn()
                .expect("start sleep"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_jailed_agents_children_are_jailed_too() {
    let g = Grove::new();
    let escape = g.dir.path().join("escape.txt");
    let script = format!(
        r#"child=$("$GROVE_BIN" spawn --no-jail -- sh -c "echo out > '{}'") || exit 1
           echo "$child" > child.id
           "$GROVE_BIN" wait "$child" > /dev/null; true"#,
        escape.display()
    );
    let id = g.spawn(&["--jail", "--env", &format!("GROVE_BIN={BIN}")], &script);
    let (_, child_record) = g.child_of_succeeded(&id);
    assert_eq!(
        child_record["jail"], true,
        "--no-jail from inside a jail is overridden"
    );
    assert_eq!(child_record["parent"], id.as_str());
    assert!(!escape.exists(), "the child wrote outside the jail");
}

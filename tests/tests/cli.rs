//! The terminal side of grove through the real binary: tables and their snapshots, JSON
//! of every command, colour, spinners, `top`, `doctor`, `config`, completions, the man
//! page, the systemd unit and the daemon log's rotation.

mod support;

use serde_json::Value;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

// ---------------------------------------------------------------------------------------
// Helpers

/// Spawns a named agent that commits one line to README.md, waits for it; returns its id.
fn agent_with_work(g: &Grove, name: &str) -> String {
    let id = g.spawn(
        &["--name", name],
        "echo 'more docs' >> README.md && git commit -qam 'docs: more' && echo done",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    id
}

/// True for a maximal run of lowercase hex that is long enough to be a commit id.
fn is_hash(word: &str) -> bool {
    word.len() >= 7
        && word
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

/// Makes output comparable across runs: ids, paths, hashes, ages and runs of spaces.
fn normalize(text: &str, g: &Grove, ids: &[&str]) -> String {
    let mut text = text.replace(&g.dir.path().display().to_string(), "<tmp>");
    for (n, id) in ids.iter().enumerate() {
        text = text.replace(id, &format!("<id{n}>"));
    }
    // The per-repository directory under the worktree root: <repo>-<hash6>.
    while let Some(at) = text.find("/worktrees/repo-") {
        let start = at + "/worktrees/repo-".len();
        let end = text[start..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .map_or(text.len(), |e| start + e);
        text.replace_range(at..end, "/worktrees/<repo-dir>");
    }
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let mut kept: Vec<String> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            let is_age = w.len() > 1
                && w[..w.len() - 1].chars().all(|c| c.is_ascii_digit())
                && w.ends_with(['s', 'm', 'h', 'd'])
                && words.get(i + 1) == Some(&"ago");
            if is_age || (w == "just" && words.get(i + 1) == Some(&"now")) {
                kept.push("<ago>".into());
                i += 2;
                continue;
            }
            let stripped = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            if is_hash(stripped) {
                kept.push(w.replace(stripped, "<hash>"));
            } else {
                kept.push(w.to_string());
            }
            i += 1;
        }
        let mut line = kept.join(" ");
        // Values that differ on every run.
        for key in ["pid", "duration", "session", "cpu time", "peak memory"] {
            if line.starts_with(&format!("{key} ")) {
                line = format!("{key:<12} <{key}>");
            }
        }
        // Column widths depend on the values replaced above.
        while line.contains("   ") {
            line = line.replace("   ", "  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Runs `command` with standard output and/or error on a new pseudo-terminal (200x50);
/// returns the exit code, what the terminal showed, and the piped rest (stdout, stderr).
struct PtyRun {
    code: i32,
    terminal: String,
    stdout: String,
    stderr: String,
}

fn open_pty() -> (OwnedFd, OwnedFd) {
    let size = nix::pty::Winsize {
        ws_row: 50,
        ws_col: 200,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&size, None).expect("openpty");
    (pty.master, pty.slave)
}

/// Reads the terminal's output as it comes, so that tests can wait for text.
fn read_terminal(master: OwnedFd) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let shown = Arc::new(Mutex::new(String::new()));
    let sink = shown.clone();
    let reader = std::thread::spawn(move || {
        let mut file = fs::File::from(master);
        let mut buf = [0u8; 4096];
        // EIO once every holder of the other end has closed it.
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("terminal buffer")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (shown, reader)
}

fn on_pty(
    mut command: Command,
    stdout: bool,
    stderr: bool,
    mut while_running: impl FnMut(&Arc<Mutex<String>>),
) -> PtyRun {
    let (master, slave) = open_pty();
    let slave_stdio = || Stdio::from(slave.try_clone().expect("dup pty"));
    command
        .stdin(Stdio::null())
        .stdout(if stdout {
            slave_stdio()
        } else {
            Stdio::piped()
        })
        .stderr(if stderr {
            slave_stdio()
        } else {
            Stdio::piped()
        });
    let child = command.spawn().expect("running grove on a terminal");
    // Only the child may hold the terminal now, or reading it never ends.
    drop(command);
    drop(slave);
    let (shown, reader) = read_terminal(master);
    while_running(&shown);
    let output = child.wait_with_output().expect("waiting for grove");
    reader.join().expect("terminal reader");
    let terminal = shown.lock().expect("terminal buffer").clone();
    PtyRun {
        code: output.status.code().unwrap_or(-1),
        terminal,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn has_keys(value: &Value, keys: &[&str], what: &str) {
    for key in keys {
        assert!(
            value.get(key).is_some(),
            "{what}: no `{key}` in {}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Snapshots of the human output

#[test]
fn list_show_and_review_read_well_on_a_pipe() {
    let g = Grove::new();
    let id = agent_with_work(&g, "docs");
    let ids = [id.as_str()];

    let list = g.ok(&["list", "--all"]);
    assert!(!list.contains('\x1b'), "no colour on a pipe: {list:?}");
    insta::assert_snapshot!("list_all", normalize(&list, &g, &ids));

    let show = g.ok(&["show", &id]);
    insta::assert_snapshot!("show", normalize(&show, &g, &ids));

    let review = g.ok(&["review"]);
    insta::assert_snapshot!("review", normalize(&review, &g, &ids));

    let detail = g.ok(&["review", &id]);
    insta::assert_snapshot!("review_detail", normalize(&detail, &g, &ids));
}

// ---------------------------------------------------------------------------------------
// JSON

#[test]
fn json_of_every_command_parses_and_has_the_documented_fields() {
    let g = Grove::new();
    let id = agent_with_work(&g, "docs");
    let schema = g.write_file(
        "schema.toml",
        "[state]\nversion = 1\n[state.channels]\nnotes = { reducer = \"append\" }\n",
    );
    g.session_by_spawn("s1", &schema);
    g.state_update("s1", &["notes", "[\"a\"]"]);

    let list = g.json(&["list", "--all"]);
    has_keys(&list["agents"][0], &AGENT_FIELDS, "list");

    let show = g.json(&["show", &id]);
    has_keys(&show, &AGENT_FIELDS, "show");

    let queue = g.json(&["queue"]);
    assert!(queue["agents"].is_array(), "queue: {queue}");

    let sessions = g.json(&["session", "list"]);
    let session = each(&sessions, "sessions")
        .find(|s| s["name"] == "s1")
        .unwrap_or_else(|| panic!("s1 in {sessions}"));
    has_keys(
        session,
        &["name", "channels", "checkpoints", "agents", "state_bytes"],
        "session list",
    );

    let history = g.json(&["state", "history", "--session", "s1"]);
    has_keys(
        &history["checkpoints"][0],
        &["id", "at_ms", "writer", "source", "channels"],
        "state history",
    );

    let gc = g.json(&["gc", "--dry-run"]);
    has_keys(&gc, &["removals", "records_deleted"], "gc --dry-run");

    // Exit 1 when a check fails: a loaded machine can breach a service level (daemon
    // start over 500 ms). The JSON is the same either way.
    let doctor = g.run(&["--json", "doctor"]);
    assert!([0, 1].contains(&doctor.code), "{}", doctor.stderr);
    let doctor: serde_json::Value = serde_json::from_str(&doctor.stdout).expect("doctor JSON");
    has_keys(&doctor, &["ok", "checks"], "doctor");
    for check in doctor["checks"].as_array().expect("checks") {
        has_keys(
            check,
            &["name", "status", "message", "data"],
            "doctor check",
        );
        assert!(
            ["ok", "warn", "fail"].contains(&check["status"].as_str().unwrap_or("")),
            "{check}"
        );
    }

    let config = g.json(&["config"]);
    has_keys(
        &config,
        &["config_file", "config_file_exists", "settings"],
        "config",
    );
    for setting in config["settings"].as_array().expect("settings") {
        has_keys(
            setting,
            &["key", "value", "source", "from", "variable"],
            "config setting",
        );
    }

    let top = g.json(&["top"]);
    has_keys(&top, &["at_ms", "agents"], "top");
}

const AGENT_FIELDS: [&str; 12] = [
    "id",
    "name",
    "session",
    "repo",
    "branch",
    "status",
    "outcome",
    "created_at_ms",
    "files_changed",
    "insertions",
    "deletions",
    "log_path",
];

// ---------------------------------------------------------------------------------------
// Colour and terminals

#[test]
fn color_always_colours_and_never_or_a_pipe_does_not() {
    let g = Grove::new();
    let id = agent_with_work(&g, "docs");

    let always = g.ok(&["--color", "always", "list", "--all"]);
    assert!(always.contains("\x1b["), "{always:?}");
    let shown = g.ok(&["--color", "always", "show", &id]);
    assert!(shown.contains("\x1b[32msucceeded"), "green: {shown:?}");

    // NO_COLOR is set for every test command; auto on a pipe is plain anyway.
    for args in [
        &["list", "--all"][..],
        &["--color", "never", "list", "--all"][..],
        &["--color", "auto", "review"][..],
    ] {
        let out = g.ok(args);
        assert!(!out.contains('\x1b'), "{args:?}: {out:?}");
    }
    let bad = g.run(&["--color", "sometimes", "list"]);
    assert_eq!(bad.code, 2, "a usage error: {}", bad.stderr);
}

#[test]
fn on_a_terminal_auto_colours_unless_no_color_is_set() {
    let g = Grove::new();
    agent_with_work(&g, "docs");

    let mut with_colour = g.command();
    with_colour.env_remove("NO_COLOR").args(["list", "--all"]);
    let run = on_pty(with_colour, true, false, |_| {});
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.terminal.contains("\x1b["), "{:?}", run.terminal);
    assert!(run.terminal.contains("succeeded"), "{:?}", run.terminal);

    let mut no_colour = g.command();
    no_colour.env("NO_COLOR", "1").args(["list", "--all"]);
    let run = on_pty(no_colour, true, false, |_| {});
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.terminal.contains("succeeded"), "{:?}", run.terminal);
    assert!(!run.terminal.contains("\x1b["), "{:?}", run.terminal);
}

#[test]
fn spawn_wait_shows_a_spinner_on_a_terminal_only() {
    let g = Grove::new();
    g.ok(&["list"]); // the daemon runs before the terminal is handed out
    let gate = g.dir.path().join("gate");
    let script = format!(
        "echo working; while [ ! -e '{}' ]; do sleep 0.05; done",
        gate.display()
    );
    let mut command = g.command();
    command.args(["spawn", "--wait", "--", "sh", "-c", &script]);
    let run = on_pty(command, false, true, |shown| {
        eventually("the spinner", Duration::from_secs(30), || {
            shown.lock().expect("terminal").contains("running ")
        });
        fs::write(&gate, "").expect("open the gate");
    });
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.terminal);
    assert!(run.stdout.contains("succeeded"), "{}", run.stdout);
    assert!(
        !run.stdout.contains("running "),
        "the spinner stays on stderr"
    );

    // With --json there is no spinner, even on a terminal, even for a wait of a second.
    let mut command = g.command();
    command.args(["--json", "spawn", "--wait", "--", "sh", "-c", "sleep 1"]);
    let run = on_pty(command, false, true, |_| {});
    assert_eq!(run.code, 0, "{}", run.terminal);
    assert_eq!(run.terminal, "", "nothing on stderr");
    let record: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(record["outcome"], "succeeded");

    // On a pipe neither.
    let out = g.run(&["spawn", "--wait", "--", "sh", "-c", "sleep 1"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.stderr, "", "nothing on a piped stderr");
}

// ---------------------------------------------------------------------------------------
// top

#[test]
fn top_shows_a_running_agents_tree_memory_and_last_log_line() {
    let g = Grove::new();
    let gate = g.dir.path().join("gate");
    let script = format!(
        "echo first line; echo 'the last line'; while [ ! -e '{}' ]; do sleep 0.05; done",
        gate.display()
    );
    let id = g.spawn(&["--name", "busy"], &script);
    let mut agent = Value::Null;
    eventually(
        "top sees the agent's output",
        Duration::from_secs(30),
        || {
            let top = g.json(&["top"]);
            agent = each(&top, "agents")
                .find(|a| a["id"] == id.as_str())
                .cloned()
                .unwrap_or(Value::Null);
            agent["last_log_line"] == "the last line"
        },
    );
    assert_eq!(agent["status"], "running", "{agent}");
    assert!(agent["pid"].as_u64().is_some(), "{agent}");
    // The shim, the shell and (often) its sleep.
    assert!(agent["processes"].as_u64().unwrap_or(0) >= 2, "{agent}");
    assert!(agent["memory_bytes"].as_u64().unwrap_or(0) > 0, "{agent}");
    assert!(agent["cpu_percent"].as_f64().is_some(), "{agent}");
    assert!(agent["runtime_ms"].as_u64().is_some(), "{agent}");

    // Not a terminal: one snapshot as a table, then exit.
    let text = g.ok(&["top"]);
    let header = text.lines().next().unwrap_or("");
    for column in ["ID", "STATUS", "CPU", "MEM", "RUNTIME", "LAST LINE"] {
        assert!(header.contains(column), "{text}");
    }
    let row = text
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} in {text}"));
    assert!(
        row.contains("busy") && row.contains("running") && row.contains("the last line"),
        "{row}"
    );

    fs::write(&gate, "").expect("open the gate");
    g.wait(&id);
    assert_eq!(g.ok(&["top"]).trim(), "no live agents");
}

// ---------------------------------------------------------------------------------------
// doctor, config

#[test]
fn doctor_checks_this_machine() {
    let g = Grove::new();
    let out = g.run(&["doctor"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let line = |name: &str| -> String {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in {}", out.stdout))
            .to_string()
    };
    let jail = line("jail");
    assert!(jail.starts_with("ok"), "{jail}");
    assert!(jail.contains("ABI "), "{jail}");
    let disk = line("disk");
    assert!(
        disk.contains("% used of") && disk.contains("cleanup starts over 98%"),
        "{disk}"
    );
    assert!(line("git").starts_with("ok"), "{}", out.stdout);
    assert!(line("socket").contains("bytes"), "{}", out.stdout);
    // It starts no daemon.
    assert!(line("daemon").contains("not running"), "{}", out.stdout);
    assert_eq!(g.run(&["daemon", "status"]).code, 3);

    let report = g.json(&["doctor"]);
    let check = |name: &str| doctor_check(&report, name);
    assert_eq!(check("jail")["status"], "ok");
    assert!(check("jail")["data"]["abi"].as_i64().unwrap_or(0) >= 6);
    // The same probe as a jailed spawn: a kernel with Landlock ABI 1 is not enough.
    let old_kernel = g.run_env(&["--json", "doctor"], &[("GROVE_TEST_LANDLOCK_ABI", "1")]);
    let old: Value = serde_json::from_str(&old_kernel.stdout).expect("json");
    let jail = doctor_check(&old, "jail");
    assert_check_says(&jail, "warn", "Landlock ABI 6");
    // Each guarantee is named, with what it rests on: the old kernel's Landlock fails
    // the write jail, not the view.
    let holds = |report: &Value, needle: &str| {
        each(&doctor_check(report, "jail")["data"], "guarantees")
            .find(|g| g["guarantee"].as_str().unwrap_or("").contains(needle))
            .unwrap_or_else(|| panic!("no guarantee naming {needle:?}"))["holds"]
            .clone()
    };
    for needle in [
        "Unix sockets",
        "secrets",
        "own processes",
        "writes only",
        "configures",
        "runs nothing it wrote",
    ] {
        assert_eq!(holds(&report, needle), true, "{needle}");
    }
    assert_eq!(holds(&old, "writes only"), false);
    assert_eq!(holds(&old, "runs nothing it wrote"), false);
    assert_eq!(holds(&old, "own processes"), true);
    let jail_line = line("jail");
    let below = out.stdout.lines().skip_while(|l| *l != jail_line).nth(1);
    assert!(
        below.is_some_and(|l| l
            .trim_start()
            .starts_with("yes  reaches none of your Unix sockets")),
        "{}",
        out.stdout
    );
    let used = check("disk")["data"]["used_percent"]
        .as_f64()
        .expect("usage");
    assert!((0.0..=100.0).contains(&used));

    // With a daemon and a database, both are checked.
    g.ok(&["list"]);
    let report = g.json(&["doctor"]);
    let daemon = doctor_check(&report, "daemon");
    assert_eq!(daemon["status"], "ok", "{daemon}");
    assert_eq!(daemon["data"]["running"], true, "{daemon}");
    let database = doctor_check(&report, "database");
    assert_eq!(database["status"], "ok", "{database}");
    assert_eq!(database["data"]["quick_check"][0], "ok", "{database}");
}

/// Agents' cgroups go below the daemon's, so doctor reports the daemon's own probe
/// (`daemon.probe`), even run from a shell in another cgroup; with no daemon it says
/// that it did not check, and starts none.
#[test]
fn doctor_reports_the_cgroup_agents_get_from_the_daemon() {
    let g = Grove::new();
    let alone = doctor_check(&g.json(&["doctor"]), "cgroup v2");
    assert_check_says(&alone, "warn", "not checked: the daemon is not running");
    assert_eq!(g.run(&["daemon", "status"]).code, 3);

    let mount = grove_sys::proc::cgroup2_mount().filter(|m| m.read_write);
    let own = grove_sys::proc::own_cgroup();
    let (Some(mount), Some(own)) = (mount, own) else {
        can_run("cgroup2", Some("no writable cgroup2 mount".into()));
        return;
    };
    let daemon_cgroup = grove_sys::proc::cgroup(g.daemon_pid() as u32).expect("daemon cgroup");
    // A cgroup of doctor's own, beside the daemon's: what a shell's probe would find
    // is not what agents get.
    let name = format!("grove-doctor-elsewhere-{}", std::process::id());
    let elsewhere = mount.point.join(own.trim_start_matches('/')).join(&name);
    if let Err(e) = fs::create_dir(&elsewhere) {
        can_run("cgroup2", Some(format!("{}: {e}", elsewhere.display())));
        return;
    }
    let out = Command::new("sh")
        .args([
            "-c",
            r#"echo $$ > "$1/cgroup.procs" && exec "$0" --json doctor"#,
            BIN,
        ])
        .arg(&elsewhere)
        .env_clear()
        .envs(grove_env(&g))
        .current_dir(&g.repo)
        .output()
        .expect("doctor in another cgroup");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    eventually("doctor's cgroup goes", Duration::from_secs(10), || {
        fs::remove_dir(&elsewhere).is_ok()
    });
    let cgroup = doctor_check(&report, "cgroup v2");
    assert_eq!(cgroup["status"], "ok", "{cgroup}");
    assert_eq!(cgroup["data"]["probed_by"], "daemon", "{cgroup}");
    assert_eq!(cgroup["data"]["agent_cgroup"], true, "{cgroup}");
    assert_eq!(cgroup["data"]["daemon_cgroup"], daemon_cgroup, "{cgroup}");
    let doctors = format!("{}/{name}", own.trim_end_matches('/'));
    assert_ne!(cgroup["data"]["daemon_cgroup"], doctors, "{cgroup}");
    let message = cgroup["message"].as_str().unwrap_or("");
    assert!(message.contains(&daemon_cgroup), "{message}");
    let jail = doctor_check(&report, "jail");
    assert_eq!(jail["data"]["probed_by"], "daemon", "{jail}");
    assert_eq!(jail["status"], "ok", "{jail}");
    // The probe's cgroup is gone again.
    let agents = mount
        .point
        .join(daemon_cgroup.trim_start_matches('/'))
        .join("grove");
    let left: Vec<_> = fs::read_dir(&agents)
        .map(|dir| dir.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    // Other tests' agents may share the daemon's cgroup; the probe's are named so.
    let left: Vec<_> = left
        .into_iter()
        .filter(|n| n.to_string_lossy().starts_with("probe-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn doctor_fails_over_a_long_socket_path() {
    let g = Grove::without_repo();
    let long = g.dir.path().join("x".repeat(120));
    let out = g.run_env(
        &["doctor"],
        &[("GROVE_HOME", long.to_str().expect("utf-8"))],
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    let socket = out
        .stdout
        .lines()
        .find(|l| l.contains("socket"))
        .unwrap_or_default();
    assert!(
        socket.starts_with("fail") && socket.contains("107-byte limit"),
        "{socket}"
    );
}

#[test]
fn config_shows_values_and_their_sources() {
    let g = Grove::new();
    g.write_config("max_idle = \"12h\"\n");
    let out = g.run_env(&["config"], &[("GROVE_MAX_WORKTREES", "7")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let row = |key: &str| -> String {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} in {}", out.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("max_worktrees"),
        "max_worktrees 7 env GROVE_MAX_WORKTREES"
    );
    assert_eq!(
        row("max_idle"),
        format!("max_idle 12h file {}", g.home.join("config.toml").display())
    );
    assert_eq!(
        row("disk_check_interval"),
        "disk_check_interval 60s default"
    );
    // The test harness sets these.
    assert_eq!(row("disk_high"), "disk_high 98 env GROVE_DISK_HIGH");
    assert_eq!(row("kill_grace"), "kill_grace 1s env GROVE_KILL_GRACE");
    assert_eq!(
        row("state_dir"),
        format!("state_dir {} env GROVE_HOME", g.home.display())
    );

    let config = g.json(&["config"]);
    let setting = each(&config, "settings")
        .find(|s| s["key"] == "retention")
        .cloned()
        .expect("retention");
    assert_eq!(setting["value"], "30days");
    assert_eq!(setting["source"], "default");
    assert_eq!(setting["variable"], "GROVE_RETENTION");

    let bad = g.run_env(&["config"], &[("GROVE_DISK_HIGH", "lots")]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("GROVE_DISK_HIGH"), "{}", bad.stderr);
}

/// A changed config.toml applies at the next start only: `grove config` says which
/// settings the running daemon still uses otherwise, and the restart that applies them.
/// Issue 30, item 8: `grove daemon reload` applies a changed config.toml with running
/// agents kept, does nothing when nothing changed, and refuses a config it cannot read
/// without touching the running daemon.
#[test]
fn daemon_reload_applies_a_changed_config_and_refuses_a_broken_one() {
    let g = Grove::new();
    g.write_config("max_idle = \"12h\"\n");
    let agent = g.spawn(&[], "sleep 60");
    let first = g.daemon_pid();
    let same = g.json(&["daemon", "reload"]);
    assert_eq!(same["reloaded"], false, "{same}");
    assert_eq!(g.daemon_pid(), first);

    g.write_config("max_idle = \"6h\"\n");
    let reloaded = g.json(&["daemon", "reload"]);
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    assert_eq!(
        reloaded["changed"],
        serde_json::json!(["max_idle 12h -> 6h"])
    );
    let second = g.daemon_pid();
    assert_ne!(second, first);
    assert_eq!(
        g.json(&["config"])["running_daemon"]["differs"],
        serde_json::json!([])
    );
    assert_eq!(g.status(&agent), "running", "the agent kept running");

    g.write_config("max_idle = \"soon\"\n");
    g.run(&["daemon", "reload"])
        .assert_exit(2, &["max_idle", "keeps its settings"]);
    assert_eq!(g.daemon_pid(), second, "the daemon was not touched");
    g.ok(&["kill", &agent]);
}

#[test]
fn config_says_when_the_running_daemon_uses_older_settings() {
    let g = Grove::new();
    g.write_config("max_idle = \"12h\"\n");
    g.ok(&["list"]);
    let pid = g.daemon_pid();
    g.write_config("max_idle = \"6h\"\n");
    let out = g.run(&["config"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("running daemon (pid {pid})"))
            && out.stderr.contains("max_idle 12h (now 6h)")
            && out.stderr.contains("grove daemon reload"),
        "{}",
        out.stderr
    );
    let json = g.json(&["config"]);
    assert_eq!(
        json["running_daemon"]["differs"],
        serde_json::json!([{"key": "max_idle", "running": "12h", "now": "6h"}]),
        "{json}"
    );
    g.ok(&["daemon", "reload"]);
    let out = g.run(&["config"]);
    assert!(!out.stderr.contains("note:"), "{}", out.stderr);
    assert_eq!(
        g.json(&["config"])["running_daemon"]["differs"],
        serde_json::json!([])
    );
    g.ok(&["daemon", "stop"]);
    assert_eq!(
        g.json(&["config"])["running_daemon"],
        serde_json::Value::Null
    );
}

#[test]
fn docs_config_md_describes_every_setting() {
    let doc = include_str!("../../docs/config.md");
    let g = Grove::without_repo();
    let config = g.json(&["config"]);
    for setting in config["settings"].as_array().expect("settings") {
        let key = setting["key"].as_str().expect("key");
        let variable = setting["variable"].as_str().expect("variable");
        assert!(
            doc.contains(&format!("`{key}`")) || doc.contains(&format!("`{variable}`")),
            "docs/config.md does not describe {key} ({variable})"
        );
        assert!(doc.contains(variable), "docs/config.md lacks {variable}");
    }
}

// ---------------------------------------------------------------------------------------
// Help, exit codes, completions, man page

#[test]
fn help_documents_exit_codes_and_usage_errors_exit_2() {
    let g = Grove::without_repo();
    let help = g.ok(&["--help"]);
    for line in [
        "Exit codes:",
        "0  ok",
        "2  usage error",
        "3  the daemon is unreachable",
        "4  refused",
    ] {
        assert!(help.contains(line), "{line:?} not in {help}");
    }
    for args in [
        &["no-such-command"][..],
        &["list", "--no-such-flag"][..],
        &["completions", "tcsh"][..],
        &["spawn"][..],
    ] {
        let out = g.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
}

#[test]
fn completions_and_the_man_page_cover_the_commands() {
    let g = Grove::without_repo();
    for shell in ["bash", "zsh", "fish"] {
        let script = g.ok(&["completions", shell]);
        assert!(script.contains("spawn"), "{shell}: {script}");
        assert!(script.contains("doctor"), "{shell}");
    }
    let man = g.ok(&["man"]);
    assert!(
        man.contains("\n.TH grove 1"),
        "{}",
        &man[..man.len().min(300)]
    );
    assert!(man.contains("spawn"), "no spawn in the man page");
    assert!(man.contains("EXIT STATUS"), "no exit codes in the man page");
    // man renders it, when man is installed.
    let rendered = Command::new("man")
        .args(["-l", "-"])
        .env("MANWIDTH", "100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    if let Ok(mut child) = rendered {
        use std::io::Write;
        let _ = child.stdin.take().expect("stdin").write_all(man.as_bytes());
        let out = child.wait_with_output().expect("man");
        if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("spawn"), "{text}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// The daemon: unit file, restart, log rotation

#[test]
fn daemon_install_writes_a_user_unit_and_restart_replaces_the_daemon() {
    let g = Grove::without_repo();
    let out = g.ok(&["daemon", "install"]);
    let unit_path = g.dir.path().join("xdg/config/systemd/user/grove.service");
    let unit = fs::read_to_string(&unit_path).expect("the unit file");
    assert!(out.contains(&unit_path.display().to_string()), "{out}");
    assert!(out.contains("ExecStart="), "it prints what it wrote: {out}");
    assert!(
        unit.contains(&format!("ExecStart={BIN} daemon run")),
        "{unit}"
    );
    assert!(unit.contains("Restart=on-failure"), "{unit}");
    assert!(
        unit.contains(&format!("Environment=GROVE_HOME={}", g.home.display())),
        "{unit}"
    );

    let before = g.daemon_pid();
    let restarted = g.json(&["daemon", "restart"]);
    let after = restarted["pid"].as_i64().expect("new pid") as i32;
    assert_eq!(restarted["stopped"], before);
    assert_ne!(before, after);
    assert!(!process_exists(before));
    assert_eq!(g.daemon_pid(), after);
}

fn dir_size_ok(path: &Path, limit: u64) {
    let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    // A file rotates before a write would take it past the limit; one event may be
    // bigger than the limit on its own.
    assert!(len <= limit + 2048, "{} is {len} bytes", path.display());
}

#[test]
fn the_daemon_log_rotates_and_keeps_three_files() {
    const LIMIT: u64 = 1500;
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX_BYTES", "1500")]);
    let log = g.home.join("daemon.log");
    let numbered = |n: u32| g.home.join(format!("daemon.log.{n}"));
    eventually("two rotations", Duration::from_secs(120), || {
        g.ok(&["spawn", "--wait", "--", "true"]);
        numbered(2).exists()
    });
    // And on: the oldest falls off.
    let oldest = fs::read_to_string(numbered(2)).expect("daemon.log.2");
    eventually("a third rotation", Duration::from_secs(120), || {
        g.ok(&["spawn", "--wait", "--", "true"]);
        fs::read_to_string(numbered(2)).unwrap_or_default() != oldest
    });
    assert!(!numbered(3).exists(), "only three files");
    for path in [log.clone(), numbered(1), numbered(2)] {
        dir_size_ok(&path, LIMIT);
        let text = fs::read_to_string(&path).expect("log");
        assert!(text.ends_with('\n'), "whole lines in {}", path.display());
    }
    assert!(fs::metadata(&log).is_ok());
}

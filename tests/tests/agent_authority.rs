//! An agent acts as itself, never as the user, and nothing it starts outlives it: each
//! test is an agent script that tries to break that (issue 14, items 1, 2, 8 and 10).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

/// Hands a connection made by a short-lived child to its parent over SCM_RIGHTS, 1,000
/// times, and asks each for something only the user may see (`agent.queue`).
const HANDOVER: &str = r#"
import json, os, socket
path = os.environ["GROVE_SOCKET"]
counts = {"user": 0, "refused": 0, "agent": 0, "closed": 0}
for _ in range(1000):
    mine, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            socket.send_fds(theirs, [b"x"], [s.fileno()])
        finally:
            os._exit(0)
    _, fds, _, _ = socket.recv_fds(mine, 1, 1)
    os.waitpid(child, 0)
    mine.close(); theirs.close()
    s = socket.socket(fileno=fds[0])
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}\n'
              b'{"jsonrpc":"2.0","id":2,"method":"agent.queue","params":{}}\n')
    answer = None
    for line in s.makefile("rb"):
        message = json.loads(line)
        if message.get("id") == 2:
            answer = message
            break
    s.close()
    if answer is None:
        counts["closed"] += 1
    elif "result" in answer:
        counts["user"] += 1
    elif "may not" in answer["error"]["message"]:
        counts["agent"] += 1
    else:
        counts["refused"] += 1
print("handover", json.dumps(counts))
"#;

/// Writes the python `source` as `name` to the test's directory; the command that runs
/// it with `args`.
fn python_command(g: &Grove, name: &str, source: &str, args: &[&Path]) -> String {
    let mut command = format!("python3 {}", g.write_file(name, source).display());
    for arg in args {
        command.push_str(&format!(" {}", arg.display()));
    }
    command
}

/// What the agent printed after `label` and a space on a line of its `log`.
fn printed<'a>(log: &'a str, label: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{label} ")))
        .unwrap_or_else(|| panic!("no {label} in the log: {log}"))
}

#[test]
fn a_thousand_handed_over_connections_never_act_as_the_user() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let script = python_command(&g, "handover.py", HANDOVER, &[]);
    let id = g.spawn(&["--jail"], &script);
    let log = g.succeeded_log(&id);
    let counts: serde_json::Value =
        serde_json::from_str(printed(&log, "handover")).expect("counts");
    assert_eq!(counts["user"], 0, "answered as the user: {counts}");
    assert_eq!(counts["closed"], 0, "closed without a word: {counts}");
    assert_eq!(
        counts["refused"].as_u64().unwrap_or(0) + counts["agent"].as_u64().unwrap_or(0),
        1000,
        "{counts}"
    );
    // The race was really run: most children were gone before the daemon could place
    // them, and those connections were refused.
    assert!(counts["refused"].as_u64().unwrap_or(0) > 0, "{counts}");
}

/// The cgroup2 mount, when its root cgroup takes processes from this one (root).
fn root_cgroup_writable() -> Result<PathBuf, String> {
    let mount = cgroup2_mount().ok_or("no cgroup2 mount")?;
    let procs = mount.join("cgroup.procs");
    fs::OpenOptions::new()
        .write(true)
        .open(&procs)
        .map_err(|e| format!("{}: {e}", procs.display()))?;
    Ok(mount)
}

#[test]
fn a_process_named_like_a_daemon_that_left_its_cgroup_dies_with_its_agent() {
    let mount = match root_cgroup_writable() {
        Ok(mount) => mount,
        Err(why) => {
            can_run("cgroup2", Some(why));
            return;
        }
    };
    let g = Grove::new();
    let pidfile = g.dir.path().join("survivor.pid");
    let shimfile = g.dir.path().join("shim.pid");
    // `python3 daemon run` and `python3 __shim`: the argv grove once spared as "a
    // daemon" and "a shim", moved to the root cgroup so that cgroup.kill misses them.
    let script = format!(
        r#"printf 'import time\ntime.sleep(600)\n' > daemon
        cp daemon __shim
        python3 daemon run &
        echo $! > {pid}
        echo $! > {procs}
        python3 __shim &
        echo $! > {shim}
        echo $! > {procs}
        echo escaped
        sleep 600"#,
        pid = pidfile.display(),
        shim = shimfile.display(),
        procs = mount.join("cgroup.procs").display()
    );
    let id = g.spawn(&[], &script);
    eventually(
        "the survivor has left its cgroup",
        Duration::from_secs(20),
        || g.ok(&["logs", &id]).contains("escaped"),
    );
    let read = |file: &PathBuf| -> i32 {
        fs::read_to_string(file)
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    };
    let (daemon_like, shim_like) = (read(&pidfile), read(&shimfile));
    assert!(process_exists(daemon_like) && process_exists(shim_like));
    g.ok(&["kill", &id]);
    assert_eq!(g.wait(&id)["outcome"], "killed");
    eventually(
        "the processes named like grove's are gone",
        Duration::from_secs(10),
        || !process_exists(daemon_like) && !process_exists(shim_like),
    );
}

#[test]
fn an_agent_stays_in_its_session_and_does_not_see_its_siblings() {
    let g = Grove::new();
    let bin = format!("GROVE_BIN={BIN}");
    let sibling = g.spawn(
        &["--session", "shared", "--name", "sibling"],
        "grove_report() { :; }; sleep 30",
    );
    let unknown = "0000ffff";
    let script = format!(
        r#""$GROVE_BIN" spawn --session elsewhere -- true; echo "other-session $?"
        "$GROVE_BIN" state get --session elsewhere > /dev/null; echo "other-state $?"
        "$GROVE_BIN" show {sibling} 2> sibling.err; echo "show-sibling $?"
        "$GROVE_BIN" show {unknown} 2> unknown.err; echo "show-unknown $?"
        sed 's/{sibling}/ID/' sibling.err > a; sed 's/{unknown}/ID/' unknown.err > b
        cmp -s a b && echo same-answer
        "$GROVE_BIN" kill {sibling}; echo "kill-sibling $?"
        child=$("$GROVE_BIN" spawn -- true) && echo "own-child $child"
        rm -f a b sibling.err unknown.err"#
    );
    let id = g.spawn(&["--session", "shared", "--env", &bin], &script);
    let log = g.succeeded_log(&id);
    assert!(log.contains("other-session 4"), "{log}");
    assert!(log.contains("other-state 4"), "{log}");
    assert!(
        log.contains("show-sibling 2") || log.contains("show-sibling 1"),
        "{log}"
    );
    let code = |what: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(what))
            .map(str::trim)
            .map(str::to_string)
    };
    assert_eq!(code("show-sibling "), code("show-unknown "), "{log}");
    assert!(log.contains("same-answer"), "{log}");
    assert!(!log.contains("kill-sibling 0"), "{log}");
    assert!(log.contains("own-child "), "{log}");
    assert_eq!(g.status(&sibling), "running");
    g.ok(&["kill", &sibling]);
}

/// Subscribes to events from inside an agent, lets the test spawn a sibling, spawns a
/// child of its own, and prints every agent id it heard of.
const LISTENER: &str = r#"
import json, os, socket, subprocess, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["GROVE_SOCKET"])
s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}\n'
          b'{"jsonrpc":"2.0","id":2,"method":"events.subscribe","params":{}}\n')
lines = s.makefile("rb")
for line in lines:
    if json.loads(line).get("id") == 2:
        break
s.settimeout(60)
open("subscribed", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
child = subprocess.run([os.environ["GROVE_BIN"], "spawn", "--", "true"],
                       capture_output=True, text=True).stdout.strip()
heard = set()
for line in lines:
    message = json.loads(line)
    params = message.get("params") or {}
    if isinstance(params, dict) and "id" in params:
        heard.add(params["id"])
    if message.get("method") == "agent.collected" and params.get("id") == child:
        break
print("child", child)
print("heard", " ".join(sorted(heard)))
"#;

#[test]
fn an_agent_hears_only_of_itself_and_its_children() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let go = g.dir.path().join("go");
    let script = python_command(&g, "listener.py", LISTENER, &[&go]);
    let bin = format!("GROVE_BIN={BIN}");
    let listener = g.spawn(&["--session", "shared", "--env", &bin], &script);
    let worktree = PathBuf::from(g.record(&listener)["worktree"].as_str().expect("wt"));
    eventually("the listener subscribed", Duration::from_secs(20), || {
        worktree.join("subscribed").exists()
    });
    let sibling = g.spawn(&["--session", "shared"], "echo secret-argv");
    g.wait(&sibling);
    fs::write(&go, "").expect("go");
    let log = g.succeeded_log(&listener);
    let child = printed(&log, "child").to_string();
    let heard = printed(&log, "heard");
    assert!(heard.contains(&child), "{log}");
    assert!(!heard.contains(&sibling), "heard of its sibling: {log}");
}

#[test]
fn one_agent_cannot_fill_the_queue_and_the_users_spawn_goes_first() {
    let g = Grove::new().with_env(&[
        ("GROVE_MAX_WORKTREES", "2"),
        ("GROVE_AGENT_MAX_QUEUED", "2"),
        ("GROVE_AGENT_MAX_CHILDREN", "4"),
    ]);
    let bin = format!("GROVE_BIN={BIN}");
    let script = r#"for i in 1 2 3 4; do
            "$GROVE_BIN" spawn -- sleep 60 > /dev/null 2> err-$i; echo "child $i $?"
        done
        cat err-4; rm -f err-*
        sleep 60"#;
    let parent = g.spawn(&["--env", &bin], script);
    eventually(
        "the parent tried four children",
        Duration::from_secs(30),
        || g.ok(&["logs", &parent]).contains("child 4"),
    );
    let log = g.ok(&["logs", &parent]);
    // One child runs (the second slot), two wait, the fourth is refused.
    assert!(log.contains("child 1 0"), "{log}");
    assert!(log.contains("child 2 0"), "{log}");
    assert!(log.contains("child 3 0"), "{log}");
    assert!(log.contains("child 4 4"), "{log}");
    assert!(log.contains("agent_max_queued"), "{log}");
    // The user's spawn queues ahead of the agent's children.
    let user = g.spawn(&[], "echo mine");
    let queue = g.json(&["queue"]);
    let order: Vec<&str> = each(&queue, "agents")
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(order.first(), Some(&user.as_str()), "{queue}");
    assert_eq!(order.len(), 3, "{queue}");
    g.ok(&["kill", &parent]);
    g.wait(&parent);
    assert_eq!(g.wait(&user)["outcome"], "succeeded");
}

/// Forks sleeping children until the kernel says no; prints how many it got.
const FORKER: &str = r#"
import os, time
made = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made += 1
print("forked", made)
"#;

#[test]
fn max_procs_caps_the_whole_tree() {
    let g = Grove::new();
    let script = python_command(&g, "forker.py", FORKER, &[]);
    let out = g.run(&["spawn", "--max-procs", "20", "--", "sh", "-c", &script]);
    if out.code == 4 && out.stderr.contains("cannot limit the number of processes") {
        can_run("pids-cgroup", Some(out.stderr));
        return;
    }
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    let made: u32 = printed(&log, "forked")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{log}"));
    assert!(
        made < 20,
        "forked {made} processes under a limit of 20: {log}"
    );
    assert!(made > 5, "the limit left too little room: {log}");
    assert_eq!(record["limits"]["max_procs"], 20);
    let shown = g.ok(&["show", &id]);
    assert!(shown.contains("processes 20"), "{shown}");
}

#[test]
fn max_procs_of_zero_is_refused_and_changes_nothing() {
    let g = Grove::new();
    g.refused(&["spawn", "--max-procs", "0", "--", "true"], "0 processes");
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
}

/// Opens 20 connections and holds them until told to let go; prints how they went.
const HOARDER: &str = r#"
import json, os, socket, sys, time
held, counts = [], {"served": 0, "refused": 0}
for _ in range(20):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["GROVE_SOCKET"])
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}\n'
              b'{"jsonrpc":"2.0","id":2,"method":"agent.list","params":{}}\n')
    for line in s.makefile("rb"):
        message = json.loads(line)
        if message.get("id") == 2:
            counts["served" if "result" in message else "refused"] += 1
            break
    held.append(s)
print("hoard", json.dumps(counts), flush=True)
open("holding", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"#;

#[test]
fn one_agent_cannot_hold_every_connection() {
    if !have_python3() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_AGENT_MAX_CONNECTIONS", "8")]);
    let script = python_command(&g, "hoarder.py", HOARDER, &[&g.files().join("release")]);
    let release = g.files().join("release");
    let id = g.spawn(&["--jail"], &script);
    let worktree = PathBuf::from(g.record(&id)["worktree"].as_str().expect("wt"));
    eventually(
        "the agent holds its connections",
        Duration::from_secs(20),
        || worktree.join("holding").exists(),
    );
    // The user is served while the agent holds all it may.
    g.ok(&["list"]);
    fs::write(&release, "").expect("release");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let log = g.ok(&["logs", &id]);
    let counts: serde_json::Value = serde_json::from_str(printed(&log, "hoard")).expect("counts");
    assert_eq!(counts["served"], 8, "{counts}");
    assert_eq!(counts["refused"], 12, "{counts}");
}

/// Fills every connection slot with connections that never say `hello` (issue 29,
/// item 5): they are closed within seconds, and the command made behind them waits
/// for its turn instead of failing.
#[test]
fn silent_connections_are_closed_and_a_command_behind_them_waits() {
    use std::io::Read;
    let g = Grove::new().with_env(&[("GROVE_MAX_CONNECTIONS", "16")]);
    g.ok(&["list"]);
    let socket = g.home.join("grove.sock");
    let mut silent: Vec<std::os::unix::net::UnixStream> = (0..16)
        .map(|_| std::os::unix::net::UnixStream::connect(&socket).expect("connect"))
        .collect();
    // Queued behind all sixteen: turned away, then served once they are closed.
    g.ok(&["list"]);
    let mut closed_silent = 0;
    for stream in &mut silent {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut said = String::new();
        stream
            .read_to_string(&mut said)
            .expect("closed by the daemon");
        // The first `list`'s slot may not have been given back yet when the last of
        // them came: that one was turned away at the cap instead.
        if said.contains("-32005") && said.contains("hello") {
            closed_silent += 1;
        } else {
            assert!(
                said.contains("-32012"),
                "a silent connection was told: {said}"
            );
        }
    }
    assert!(
        closed_silent >= 15,
        "{closed_silent} of 16 closed for silence"
    );
    assert_eq!(
        metric_sum(&g, "grove_connections_silent_total"),
        f64::from(closed_silent)
    );
    assert!(metric_sum(&g, "grove_connections_turned_away_total") >= 1.0);
}

/// An agent holds every connection it can get (issue 29, item 5): the last eighth of
/// the cap stays the user's, and the agent's own `grove` waits for a slot instead of
/// failing its command.
const CROWDER: &str = r#"
import json, os, socket, subprocess, sys, time
held, counts = [], {"served": 0, "busy": 0, "other": 0}
while counts["busy"] + counts["other"] == 0 and len(held) < 100:
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["GROVE_SOCKET"])
    try:
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}\n'
                  b'{"jsonrpc":"2.0","id":2,"method":"agent.list","params":{}}\n')
    except BrokenPipeError:
        pass  # turned away before we wrote: its one line is still there to read
    for line in s.makefile("rb"):
        message = json.loads(line)
        if "result" in message and message.get("id") == 2:
            counts["served"] += 1
            held.append(s)
            break
        if "error" in message:
            counts["busy" if message["error"]["code"] == -32012 else "other"] = 1
            print("turned away", json.dumps(message), flush=True)
            break
print("crowd", json.dumps(counts), flush=True)
own = subprocess.Popen([os.environ["GROVE_BIN"], "list"], stdout=subprocess.DEVNULL)
open("holding", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for s in held:
    s.close()
print("own-list", own.wait(), flush=True)
"#;

#[test]
fn agents_never_take_the_users_reserve_and_their_commands_wait_for_a_slot() {
    if !have_python3() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_MAX_CONNECTIONS", "16")]);
    let release = g.files().join("release");
    let script = python_command(&g, "crowder.py", CROWDER, &[&release]);
    let bin = format!("GROVE_BIN={BIN}");
    let id = g.spawn(&["--env", &bin], &script);
    let worktree = PathBuf::from(g.record(&id)["worktree"].as_str().expect("wt"));
    // Minutes, not seconds: the other tests of this binary fork a thousand processes
    // beside it on two cores.
    let held_by = std::time::Instant::now() + Duration::from_secs(120);
    while !worktree.join("holding").exists() {
        assert!(
            std::time::Instant::now() < held_by,
            "the agent never held its connections: {}\n{}",
            g.ok(&["logs", &id]),
            g.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The user is served at once from the reserve, while the agent's own `grove list`
    // is turned away (counted) and keeps trying.
    eventually(
        "the agent's own grove list turned away",
        Duration::from_secs(120),
        || metric_sum(&g, "grove_connections_turned_away_total") >= 2.0,
    );
    g.ok(&["list"]);
    fs::write(&release, "").expect("release");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let log = g.ok(&["logs", &id]);
    let counts: serde_json::Value = serde_json::from_str(printed(&log, "crowd")).expect("counts");
    // Never more than the 14 shared slots (16 less the user's 2); fewer when one of
    // the test's own short connections still held a slot as the agent began.
    let served = counts["served"].as_u64().expect("served");
    assert!((10..=14).contains(&served), "{counts}");
    assert_eq!(counts["busy"], 1, "{log}");
    assert_eq!(counts["other"], 0, "{log}");
    assert_eq!(printed(&log, "own-list"), "0", "{log}");
}

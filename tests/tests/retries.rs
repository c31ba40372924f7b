//! Clients ride out a daemon restart (docs/protocol.md, "Retries and idempotency"): a
//! spawn, a wait and a state update in flight while the daemon is killed each complete
//! after the restart, and none takes effect twice (runs counted from inside agents).

mod support;

use serde_json::json;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::Duration;
use support::*;

/// Starts a daemon that kills itself once a request with an idempotency key has taken
/// effect, before it answers; the clients (without that setting) start the next one.
fn crash_before_answering(g: &Grove) {
    g.ok(&["daemon", "stop"]);
    let out = g.run_env(&["list"], &[("GROVE_TEST_CRASH_AT", "before_answer")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A raw connection that has said hello: one request line, one answer line.
struct Raw {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Raw {
    fn open(g: &Grove) -> Raw {
        g.ok(&["list"]);
        let stream = UnixStream::connect(g.home.join("grove.sock")).expect("connect");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut raw = Raw { stream, reader };
        raw.ask(json!({"jsonrpc": "2.0", "id": 1, "method": "hello",
            "params": {"protocol": grove_proto::PROTOCOL_VERSION}}));
        raw
    }

    fn ask(&mut self, line: serde_json::Value) -> serde_json::Value {
        writeln!(self.stream, "{line}").expect("send");
        let mut answer = String::new();
        self.reader.read_line(&mut answer).expect("answer");
        serde_json::from_str(&answer).expect("json")
    }

    fn create_session(&mut self, name: &str) {
        self.create_session_with(name, "x = { reducer = \"overwrite\" }");
    }

    fn create_session_with(&mut self, name: &str, channels: &str) {
        let text = format!("[state]\nversion = 1\n[state.channels]\n{channels}\n");
        let made = self.ask(
            json!({"jsonrpc": "2.0", "id": 0, "method": "session.create",
            "params": {"name": name, "schema_text": {"origin": "t.toml", "text": text}}}),
        );
        assert!(made["error"].is_null(), "{made}");
    }
}

fn open_connections(g: &Grove) -> f64 {
    let metrics = g.json(&["metrics"]);
    metrics["metrics"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "grove_connections"))
        .and_then(|m| m["series"][0]["value"].as_f64())
        .unwrap_or(0.0)
}

fn runs(dir: &std::path::Path, id: &str) -> usize {
    fs::read_to_string(dir.join(id))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_spawn_whose_answer_a_crash_cut_off_is_retried_without_a_second_agent() {
    let g = Grove::new();
    let runs_dir = g.make_dir("runs");
    let old = g.daemon_pid();
    crash_before_answering(&g);
    let crashing = g.json(&["daemon", "status"])["pid"].as_i64();
    assert_ne!(crashing, Some(old as i64));
    let script = format!("echo run >> '{}'/$GROVE_AGENT_ID", runs_dir.display());
    let id = g.spawn(&[], &script);
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let agents = g.all_agents();
    assert_eq!(agents.len(), 1, "one agent: {agents:?}");
    assert_eq!(runs(&runs_dir, &id), 1, "the agent ran once");
    assert!(
        !g.daemon_log_lines("GROVE_TEST_CRASH_AT: crashing on purpose")
            .is_empty(),
        "the daemon did crash before answering"
    );
}

#[test]
fn a_state_update_whose_answer_a_crash_cut_off_counts_once() {
    let g = Grove::new();
    commit_schema(
        &g,
        "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"add\" }\n",
    );
    let gate = g.dir.path().join("gate");
    let done = g.dir.path().join("updated");
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; \"$GROVE_BIN\" state update n 1 && touch '{}'",
        gate.display(),
        done.display()
    );
    let g = g.with_env(&[("GROVE_BIN", BIN)]);
    let id = g.spawn(&["--session", "s"], &script);
    crash_before_answering(&g);
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert!(
        done.exists(),
        "the update was acknowledged after the restart"
    );
    let state = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(state["state"]["n"], json!(1), "counted once: {state}");
    assert!(
        !g.daemon_log_lines("GROVE_TEST_CRASH_AT: crashing on purpose")
            .is_empty(),
        "the daemon did crash before answering"
    );
}

#[test]
fn a_wait_in_flight_while_the_daemon_is_killed_completes_after_the_restart() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "", "");
    let mut wait = g.command();
    wait.args(["--json", "wait", &id]).stdout(Stdio::piped());
    let waiting = wait.spawn().expect("grove wait");
    // The wait is in the daemon's hands once it shows as a connection there (besides
    // the one asking).
    eventually("the wait is in flight", Duration::from_secs(10), || {
        open_connections(&g) >= 2.0
    });
    g.crash_daemon();
    fs::write(&gate, "").expect("gate");
    let out = waiting.wait_with_output().expect("wait output");
    assert!(out.status.success(), "grove wait rode out the restart");
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(done["agents"][0]["outcome"], "succeeded", "{done}");
}

#[test]
fn a_state_watch_resumes_after_the_daemon_is_killed() {
    let g = Grove::new();
    Raw::open(&g).create_session("w");
    let mut watch = g.command();
    watch
        .args(["--json", "state", "watch", "--session", "w"])
        .stdout(Stdio::piped());
    let mut watching = watch.spawn().expect("grove state watch");
    let mut lines = BufReader::new(watching.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("line").expect("read");
    assert!(first.contains("\"checkpoint\""), "{first}");
    // Stopped, the watcher notices the restart only after three updates went by on
    // the new daemon: it says it missed three, as a number (issue 29, item 7).
    let watcher = nix::unistd::Pid::from_raw(watching.id() as i32);
    nix::sys::signal::kill(watcher, nix::sys::signal::Signal::SIGSTOP).expect("stop");
    g.crash_daemon();
    for value in ["1", "2", "3"] {
        g.state_update("w", &["x", value]);
    }
    nix::sys::signal::kill(watcher, nix::sys::signal::Signal::SIGCONT).expect("cont");
    let resumed = lines.next().expect("line").expect("read");
    assert!(
        resumed.contains("state.lagged") && resumed.contains("reconnected"),
        "{resumed}"
    );
    let resumed: serde_json::Value = serde_json::from_str(&resumed).expect("json");
    assert_eq!(resumed["params"]["missed"], 3, "{resumed}");
    g.state_update("w", &["x", "1"]);
    let update = lines.next().expect("line").expect("read");
    assert!(update.contains("state.updated"), "{update}");
    let _ = watching.kill();
    let _ = watching.wait();
}

#[test]
fn a_key_sent_again_gets_the_first_answer_and_a_key_for_another_method_is_refused() {
    let g = Grove::new();
    let mut raw = Raw::open(&g);
    raw.create_session("k");
    let mut ask = |line| raw.ask(line);
    let update = |id: u64, key: serde_json::Value, retry: bool| {
        json!({"jsonrpc": "2.0", "id": id, "method": "state.update", "params": {
            "session": "k", "writes": [{"channel": "x", "value": id}], "idempotency_key": key,
            "idempotency_retry": retry}})
    };
    let first = ask(update(2, json!("key-1"), false));
    let again = ask(update(3, json!("key-1"), true));
    assert_eq!(first["result"], again["result"], "{first} {again}");
    let other = ask(
        json!({"jsonrpc": "2.0", "id": 4, "method": "agent.kill", "params": {
        "id": "nobody", "idempotency_key": "key-1", "idempotency_retry": true}}),
    );
    let message = other["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("was sent with state.update"), "{other}");
    let empty = ask(update(5, json!(""), false));
    let message = empty["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("idempotency_key") && message.contains("empty"),
        "{empty}"
    );
    let state = g.json(&["state", "get", "--session", "k"]);
    assert_eq!(
        state["state"]["x"],
        json!(2),
        "the second send changed nothing: {state}"
    );
}

#[test]
fn a_daemon_stopped_on_purpose_is_not_started_again_by_a_waiting_client() {
    let g = Grove::new();
    let id = g.spawn(&[], "sleep 30");
    let mut wait = g.command();
    wait.args(["wait", &id]).stderr(Stdio::piped());
    let waiting = wait.spawn().expect("grove wait");
    eventually("the wait is in flight", Duration::from_secs(10), || {
        open_connections(&g) >= 2.0
    });
    g.ok(&["daemon", "stop"]);
    // The waiting client gives up (after a short grace for a restart) instead of
    // bringing the stopped daemon back.
    let out = waiting.wait_with_output().expect("wait output");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = g.run(&["--json", "daemon", "status"]);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(status["running"], false, "{status}");
    g.ok(&["kill", &id]);
}

/// One MCP tool call by the official Python SDK through `grove mcp` (started as an MCP
/// host starts it, with this grove's environment): `{"error", "text"}` of the result.
fn mcp_tool(g: &Grove, python: &str, tool: &str, args: serde_json::Value) -> serde_json::Value {
    const CLIENT: &str = r#"
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(tool, args):
    server = StdioServerParameters(
        command=os.environ["GROVE_BIN"], args=["mcp"], env=dict(os.environ), cwd=os.getcwd())
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool(tool, json.loads(args))
            error = getattr(r, "is_error", None) or getattr(r, "isError", False)
            print(json.dumps({"error": bool(error), "text": r.content[0].text}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;
    let out = std::process::Command::new(python)
        .args(["-c", CLIENT, tool, &args.to_string()])
        .current_dir(&g.repo)
        .envs(grove_env(g))
        .env("GROVE_BIN", BIN)
        .output()
        .expect("python");
    json_printed(&out)
}

#[test]
fn an_mcp_clients_spawn_and_state_update_cut_off_by_a_crash_complete_once() {
    let Some(python) = mcp_python() else {
        return;
    };
    let g = Grove::new();
    Raw::open(&g).create_session_with("m", "n = { reducer = \"add\" }");
    let runs_dir = g.make_dir("runs");
    let crashes = || {
        g.daemon_log_lines("GROVE_TEST_CRASH_AT: crashing on purpose")
            .len()
    };

    crash_before_answering(&g);
    let script = format!("echo run >> '{}'/$GROVE_AGENT_ID", runs_dir.display());
    let spawned = mcp_tool(
        &g,
        &python,
        "spawn_agent",
        json!({"argv": ["sh", "-c", script], "name": "mcp-crash"}),
    );
    assert_eq!(spawned["error"], false, "{spawned}");
    assert_eq!(
        crashes(),
        1,
        "the daemon crashed before answering the spawn"
    );
    let spawned: serde_json::Value =
        serde_json::from_str(spawned["text"].as_str().unwrap_or_default()).expect("record");
    let id = spawned["id"].as_str().expect("id").to_string();
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let agents = g.all_agents();
    assert_eq!(agents.len(), 1, "one agent: {agents:?}");
    assert_eq!(runs(&runs_dir, &id), 1, "the agent ran once");

    crash_before_answering(&g);
    let updated = mcp_tool(
        &g,
        &python,
        "state_update",
        json!({"session": "m", "writes": [{"channel": "n", "value": 1}]}),
    );
    assert_eq!(updated["error"], false, "{updated}");
    assert_eq!(
        crashes(),
        2,
        "the daemon crashed before answering the update"
    );
    let state = g.json(&["state", "get", "--session", "m"]);
    assert_eq!(state["state"]["n"], json!(1), "counted once: {state}");
}

/// A spawn sent again while its agent is still being prepared (here: a restart's
/// rollback of the preparation the crash interrupted, held until a gate exists) is
/// answered as the first spawn would have been: once the agent runs, not `preparing`.
#[test]
fn a_spawn_sent_again_while_its_agent_is_prepared_answers_once_it_runs() {
    let g = Grove::new();
    g.ok(&["daemon", "stop"]);
    let out = g.run_env(&["list"], &[("GROVE_TEST_HOLD_AT", "prepared_worktree")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let repo = g.repo.clone();
    let spawn = move |retry: bool| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "agent.spawn", "params": {
            "argv": ["sh", "-c", "exit 0"], "repo": repo, "idempotency_key": "spawn-1",
            "idempotency_retry": retry}})
    };
    let mut first = Raw::open(&g);
    writeln!(first.stream, "{}", spawn(false)).expect("send");
    eventually(
        "the agent is held in preparation",
        Duration::from_secs(10),
        || g.json(&["list"])["agents"][0]["status"] == "preparing",
    );
    g.crash_daemon();
    drop(first);

    let gate = g.dir.path().join("rollback-gate");
    let gate_text = gate.display().to_string();
    let out = g.run_env(
        &["list"],
        &[
            ("GROVE_TEST_HOLD_AT", "rolling_back"),
            ("GROVE_TEST_HOLD_UNTIL", &gate_text),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(g.json(&["list"])["agents"][0]["status"], "preparing");
    let mut retry = Raw::open(&g);
    let asking = std::thread::spawn(move || retry.ask(spawn(true)));
    // The retry waits in the daemon (its connection stays open) until the agent runs.
    eventually("the retry is in flight", Duration::from_secs(10), || {
        asking.is_finished() || open_connections(&g) >= 2.0
    });
    fs::write(&gate, "").expect("gate");
    let answer = asking.join().expect("retry");
    assert_eq!(answer["result"]["status"], "running", "{answer}");
    let id = answer["result"]["id"].as_str().expect("id").to_string();
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let agents = g.all_agents();
    assert_eq!(agents.len(), 1, "one agent: {agents:?}");
}

/// One agent of the chaos run: single `grove state update` calls, no retry loop of its
/// own; a call that fails is written down with what it printed.
const UPDATER: &str = r#"
i=0
while [ ! -e "$STOP" ]; do
  i=$((i + 1))
  if ! out=$("$GROVE_BIN" state update n "$i" 2>&1); then
    printf 'agent %s call %s: %s\n' "$GROVE_AGENT_ID" "$i" "$out" >> "$FAILED"
  fi
  echo "$i" > "$CALLS-$GROVE_AGENT_ID"
done
"#;

/// What the user's commands of the chaos run do, one kind per thread.
const USER_CALLS: [&[&str]; 3] = [
    &["list"],
    &["state", "update", "--session", "c", "x", "1"],
    &["--json", "list", "--all"],
];

/// Issue 29, item 7: the clients' chaos run. Agents and the user's commands call the
/// daemon without pause while it is restarted eight times, four by `grove daemon
/// restart` and four by kill -9; not one call fails.
#[test]
fn eight_restarts_under_busy_clients_fail_no_call() {
    let g = Grove::new().with_env(&[("GROVE_BIN", BIN)]);
    Raw::open(&g).create_session("c");
    let stop = g.dir.path().join("stop");
    let failed = g.dir.path().join("failed");
    let calls = g.dir.path().join("calls");
    let env = |name: &str, path: &std::path::Path| format!("{name}={}", path.display());
    let (stop_env, failed_env, calls_env) = (
        env("STOP", &stop),
        env("FAILED", &failed),
        env("CALLS", &calls),
    );
    let schema = g.write_file(
        "counter.toml",
        "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"overwrite\" }\n",
    );
    let schema = schema.display().to_string();
    let agents: Vec<String> = (0..3)
        .map(|_| {
            let args = [
                "--schema",
                &schema,
                "--env",
                &stop_env,
                "--env",
                &failed_env,
                "--env",
                &calls_env,
            ];
            g.spawn(&args, UPDATER)
        })
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let user_failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for args in USER_CALLS {
            let (g, stop, done, user_failures) = (&g, &stop, &done, &user_failures);
            scope.spawn(move || {
                while !stop.exists() {
                    let out = g.run(args);
                    if out.code != 0 {
                        let failure = format!("{args:?}: exit {}: {}", out.code, out.stderr);
                        user_failures.lock().expect("lock").push(failure);
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        let agent_calls = || -> usize {
            agents
                .iter()
                .map(|id| {
                    let file = format!("{}-{id}", calls.display());
                    let text = fs::read_to_string(file).unwrap_or_default();
                    text.trim().parse::<usize>().unwrap_or(0)
                })
                .sum()
        };
        for restart in 0..8 {
            // Each restart lands among calls: some of every kind were made since the last.
            let (users, agents_then) = (
                done.load(std::sync::atomic::Ordering::SeqCst),
                agent_calls(),
            );
            eventually("calls between restarts", Duration::from_secs(60), || {
                done.load(std::sync::atomic::Ordering::SeqCst) >= users + 6
                    && agent_calls() >= agents_then + 3
            });
            if restart % 2 == 0 {
                g.ok(&["daemon", "restart"]);
            } else {
                g.crash_daemon();
            }
        }
        let (users, agents_then) = (
            done.load(std::sync::atomic::Ordering::SeqCst),
            agent_calls(),
        );
        eventually(
            "calls after the last restart",
            Duration::from_secs(60),
            || {
                done.load(std::sync::atomic::Ordering::SeqCst) >= users + 6
                    && agent_calls() >= agents_then + 3
            },
        );
        fs::write(&stop, "").expect("stop");
    });
    for id in &agents {
        assert_eq!(g.wait(id)["outcome"], "succeeded", "agent {id}");
    }
    let agent_failures = fs::read_to_string(&failed).unwrap_or_default();
    let user_failures = user_failures.into_inner().expect("lock");
    assert!(
        agent_failures.is_empty() && user_failures.is_empty(),
        "calls failed across 8 restarts:\n{agent_failures}\n{}\ndaemon log:\n{}",
        user_failures.join("\n"),
        fs::read_to_string(g.home.join("daemon.log")).unwrap_or_default()
    );
}

//! An agent asks and waits (issue 34, item 8): `grove ask` inside an agent records a
//! question, shows the agent as waiting with it, and blocks until the user or its parent
//! answers (or its timeout passes); the answer is printed to the agent and stored in its
//! session's `decisions` channel by whoever gave it.

mod support;

use serde_json::{json, Value};
use std::fs;
use std::time::Duration;
use support::*;

/// An agent script that asks `ask_args` (already quoted for sh) and prints the answer
/// and the exit code of `grove ask`.
fn asking(ask_args: &str) -> String {
    format!(
        r#"answer=$("$GROVE_BIN" ask {ask_args} 2> ask.err); code=$?
        echo "answer: $answer"; echo "code: $code"; cat ask.err; rm -f ask.err"#
    )
}

fn bin_env() -> String {
    format!("GROVE_BIN={BIN}")
}

/// Spawns `script` in `session` with `extra` flags; returns its id once it asks.
fn spawn_asking(g: &Grove, session: &str, extra: &[&str], script: &str) -> String {
    let bin = bin_env();
    let mut args = vec!["--session", session, "--env", &bin];
    args.extend_from_slice(extra);
    let id = g.spawn(&args, script);
    await_question(g, &id);
    id
}

/// The agent's record once it has a question.
fn await_question(g: &Grove, id: &str) -> Value {
    let mut record = Value::Null;
    eventually("the agent's question", Duration::from_secs(30), || {
        record = g.record(id);
        !record["question"].is_null() || record["status"] != "running"
    });
    assert!(!record["question"].is_null(), "no question: {record}");
    record
}

fn decisions(g: &Grove, session: &str) -> Vec<Value> {
    let state = g.json(&["state", "get", "--session", session])["state"].clone();
    state["decisions"].as_array().cloned().unwrap_or_default()
}

fn session_of(g: &Grove, id: &str) -> String {
    let record = g.record(id);
    record["session"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {record}"))
        .to_string()
}

fn history(g: &Grove, session: &str) -> Vec<Value> {
    g.json(&["state", "history", "--session", session])["checkpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_user_answers_and_the_agent_prints_it_and_its_state_keeps_the_decision() {
    let g = Grove::new();
    let id = spawn_asking(&g, "plan", &[], &asking("'drop the old table?'"));
    let record = await_question(&g, &id);
    assert_eq!(record["question"]["text"], "drop the old table?");
    assert_eq!(record["activity"], "waiting");
    let list = g.ok(&["list"]);
    assert!(list.contains("waiting: drop the old table?"), "{list}");
    let show = g.ok(&["show", &id]);
    assert_holds_all(&show, &["question", "drop the old table?", "grove answer"]);

    let said = g.ok(&["answer", &id, "yes, drop it"]);
    assert!(said.contains("drop the old table?"), "{said}");
    let log = g.succeeded_log(&id);
    assert!(log.contains("answer: yes, drop it\n"), "{log}");
    assert!(log.contains("code: 0"), "{log}");

    let decided = decisions(&g, "plan");
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["question"], "drop the old table?");
    assert_eq!(decided[0]["answer"], "yes, drop it");
    assert_eq!(decided[0]["by"], "user");
    assert_eq!(decided[0]["agent"], id.as_str());
    // The history says who decided: the checkpoint that wrote it is the user's.
    let newest = &history(&g, "plan")[0];
    assert_eq!(newest["writer"], "user", "{newest}");
    assert_eq!(newest["channels"], json!(["decisions"]));
    let record = g.record(&id);
    assert!(record["question"].is_null(), "{record}");
    assert_eq!(record["answer"]["by"], "user");
    assert_eq!(record["answer"]["answer"], "yes, drop it");
}

#[test]
fn an_answer_outside_the_choices_is_refused_and_changes_nothing() {
    let g = Grove::new();
    let id = spawn_asking(&g, "pick", &[], &asking("--choices yes,no 'merge now?'"));
    let record = await_question(&g, &id);
    assert_eq!(record["question"]["choices"], json!(["yes", "no"]));
    let before = history(&g, "pick").len();
    g.run(&["answer", &id, "maybe"])
        .assert_exit(2, &["`maybe` is not one of the choices", "yes, no"]);
    assert_eq!(history(&g, "pick").len(), before);
    assert!(decisions(&g, "pick").is_empty());
    assert_eq!(g.record(&id)["question"]["text"], "merge now?");
    g.ok(&["answer", &id, "no"]);
    let log = g.succeeded_log(&id);
    assert!(log.contains("answer: no\n"), "{log}");
    assert_eq!(decisions(&g, "pick")[0]["choices"], json!(["yes", "no"]));
}

#[test]
fn an_ask_that_times_out_exits_6_and_the_question_goes() {
    let g = Grove::new();
    let bin = bin_env();
    let id = g.spawn(
        &["--session", "late", "--env", &bin],
        &asking("--timeout 1s 'anyone there?'"),
    );
    let log = g.succeeded_log(&id);
    assert!(log.contains("code: 6"), "{log}");
    assert!(log.contains("no answer within 1s"), "{log}");
    let record = g.record(&id);
    assert!(record["question"].is_null(), "{record}");
    assert!(decisions(&g, "late").is_empty());
}

/// A `grove ask` killed before its deadline leaves its question behind, which goes at
/// the deadline all the same while the agent runs on.
#[test]
fn a_question_nobody_waits_on_goes_at_its_deadline() {
    let g = Grove::new();
    let (kill, end) = (g.files().join("kill"), g.files().join("end"));
    let script = format!(
        r#""$GROVE_BIN" ask --timeout 2s 'orphan?' 2> /dev/null & ask=$!
        while [ ! -e '{kill}' ]; do sleep 0.02; done
        kill $ask
        while [ ! -e '{end}' ]; do sleep 0.02; done"#,
        kill = kill.display(),
        end = end.display()
    );
    let id = spawn_asking(&g, "orphan", &[], &script);
    fs::write(&kill, "").expect("kill gate");
    eventually("the question to go", Duration::from_secs(20), || {
        g.record(&id)["question"].is_null()
    });
    let record = g.record(&id);
    assert_eq!(record["status"], "running", "{record}");
    assert!(record["activity"].is_null(), "{record}");
    g.run(&["answer", &id, "late"])
        .assert_exit(2, &["does not ask anything"]);
    fs::write(&end, "").expect("end gate");
    g.succeeded_log(&id);
    assert!(decisions(&g, "orphan").is_empty());
}

/// What a client asking again after a lost connection gets: the same `ask_id` finds the
/// question withdrawn at its deadline, or the answer given meanwhile. The test asks for
/// the agent with its token (any connection presenting it is the agent).
#[test]
fn an_ask_sent_again_finds_its_timeout_or_its_answer() {
    let g = Grove::new();
    let token_file = g.files().join("token");
    let (id, gate) = g.spawn_gated(
        &["--session", "again"],
        &format!("echo \"$GROVE_TOKEN\" > '{}'", token_file.display()),
        "",
    );
    let mut token = String::new();
    eventually("the agent's token", Duration::from_secs(20), || {
        token = fs::read_to_string(&token_file).unwrap_or_default();
        token.ends_with('\n')
    });
    let token = token.trim().to_string();
    let ask = |ask_id: &str, timeout_ms: Option<u64>| {
        let mut params = json!({"text": "q", "ask_id": ask_id, "token": token});
        if let Some(ms) = timeout_ms {
            params["timeout_ms"] = json!(ms);
        }
        call(&mut client(&g), "agent.ask", params).expect("ask")
    };
    assert_eq!(ask("k1", Some(300))["timed_out"], true);
    let begun = std::time::Instant::now();
    let again = ask("k1", Some(60_000));
    assert_eq!(again["timed_out"], true, "{again}");
    assert!(begun.elapsed() < Duration::from_secs(30), "it asked anew");
    assert!(g.record(&id)["question"].is_null());

    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| ask("k2", None));
        await_question(&g, &id);
        g.ok(&["answer", &id, "ok"]);
        let answered = waiting.join().expect("the ask");
        assert_eq!(answered["answered"]["answer"], "ok", "{answered}");
    });
    let again = ask("k2", None);
    assert_eq!(again["answered"]["answer"], "ok", "{again}");
    assert_eq!(decisions(&g, "again").len(), 1);
    fs::write(&gate, "").expect("gate");
    g.succeeded_log(&id);
}

/// A daemon that crashes after storing a decision but before saving the record still
/// shows the question after its restart; the same answer given again decides once.
#[test]
fn an_answer_given_again_after_a_crash_decides_once() {
    let g = Grove::new();
    let gate = g.files().join("gate");
    let script = format!(
        r#""$GROVE_BIN" ask 'keep it?'; echo "code: $?"
        while [ ! -e '{}' ]; do sleep 0.02; done"#,
        gate.display()
    );
    // Its ask gives up at the stop, so that no `grove ask` inside the agent starts the
    // daemons of this test.
    let id = spawn_asking(&g, "crash", &["--env", "GROVE_RETRY_FOR=0"], &script);
    g.ok(&["daemon", "stop"]);
    g.crash_during("mid_answer", &["answer", &id, "keep"]);
    let record = g.record(&id);
    assert_eq!(record["question"]["text"], "keep it?", "{record}");
    let decided = decisions(&g, "crash");
    assert_eq!(decided.len(), 1, "the decision was stored before the crash");
    let checkpoint = history(&g, "crash")[0]["id"].clone();
    let answered = g.json(&["answer", &id, "keep"]);
    assert_eq!(answered["checkpoint"], checkpoint, "{answered}");
    assert_eq!(decisions(&g, "crash").len(), 1);
    assert!(g.record(&id)["question"].is_null());
    fs::write(&gate, "").expect("gate");
    g.succeeded_log(&id);
}

/// The parent spawns an asker and a sibling of it; the asker first tries to answer
/// itself, the sibling tries to answer the asker, then the parent answers over the
/// socket (`grove answer` run inside the parent is the parent).
#[test]
fn only_the_parent_answers_among_agents() {
    let g = Grove::new();
    let asker = g.write_file(
        "asker.sh",
        r#""$GROVE_BIN" answer "$GROVE_AGENT_ID" myself 2> self.err; echo "self: $?"
        cat self.err
        echo "got: $("$GROVE_BIN" ask --choices go,stop 'go on?')""#,
    );
    let sibling = g.write_file(
        "sibling.sh",
        r#""$GROVE_BIN" answer "$ASKER" go 2> sibling.err; echo "sibling: $?"
        cat sibling.err"#,
    );
    let parent = format!(
        r#"a=$("$GROVE_BIN" spawn -- sh {asker}); echo "asker: $a"
        "$GROVE_BIN" wait --until waiting "$a" > /dev/null
        b=$("$GROVE_BIN" spawn --env ASKER="$a" -- sh {sibling}); echo "sibling-id: $b"
        "$GROVE_BIN" wait "$b" > /dev/null
        "$GROVE_BIN" answer "$a" go > /dev/null && echo parent-answered
        "$GROVE_BIN" wait "$a" > /dev/null"#,
        asker = asker.display(),
        sibling = sibling.display()
    );
    let bin = bin_env();
    let parent_id = g.spawn(&["--session", "team", "--env", &bin], &parent);
    let log = g.succeeded_log(&parent_id);
    assert!(log.contains("parent-answered"), "{log}");
    let child = |label: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} in {log}"))
            .trim()
            .to_string()
    };
    let (asker_id, sibling_id) = (child("asker: "), child("sibling-id: "));
    let asker_log = g.ok(&["logs", &asker_id]);
    assert!(asker_log.contains("self: 4"), "{asker_log}");
    assert!(
        asker_log.contains("may not answer its own question"),
        "{asker_log}"
    );
    assert!(asker_log.contains("got: go"), "{asker_log}");
    // A sibling does not see the asker: answered as for an agent that does not exist.
    let sibling_log = g.ok(&["logs", &sibling_id]);
    assert!(sibling_log.contains("sibling: 2"), "{sibling_log}");
    assert!(sibling_log.contains("no agent"), "{sibling_log}");
    // The asker's own session holds the one decision, the parent's.
    let session = session_of(&g, &asker_id);
    let decided = decisions(&g, &session);
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["by"], parent_id.as_str());
    assert_eq!(history(&g, &session)[0]["writer"], parent_id.as_str());
}

#[test]
fn a_parent_program_answers_over_the_socket_and_hears_the_question() {
    let g = Grove::new();
    let mut events = client(&g);
    call(&mut events, "events.subscribe", json!({})).expect("subscribe");
    let id = spawn_asking(&g, "sock", &[], &asking("'which port?'"));
    let note = loop {
        let note = events.next_notification().expect("event");
        if note.method == "agent.waiting" && note.params["id"] == id.as_str() {
            break note;
        }
    };
    assert_eq!(note.params["question"]["text"], "which port?");
    let mut c = client(&g);
    let answered = call(&mut c, "agent.answer", json!({"id": id, "text": "8080"})).expect("answer");
    assert_eq!(answered["by"], "user");
    assert_eq!(answered["question"], "which port?");
    let log = g.succeeded_log(&id);
    assert!(log.contains("answer: 8080\n"), "{log}");
    let note = loop {
        let note = events.next_notification().expect("event");
        if note.method == "agent.answered" {
            break note;
        }
    };
    assert_eq!(note.params["answer"]["answer"], "8080");
}

#[test]
fn a_jailed_agent_asks() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let id = spawn_asking(&g, "jailed", &["--jail"], &asking("'may I?'"));
    assert_eq!(g.record(&id)["jail"], true);
    g.ok(&["answer", &id, "you may"]);
    let log = g.succeeded_log(&id);
    assert!(log.contains("answer: you may\n"), "{log}");
    assert_eq!(decisions(&g, "jailed")[0]["answer"], "you may");
}

#[test]
fn an_answer_given_after_a_daemon_restart_reaches_the_waiting_ask() {
    let g = Grove::new();
    let id = spawn_asking(&g, "restart", &[], &asking("'still there?'"));
    let before = g.daemon_pid();
    g.ok(&["daemon", "restart"]);
    assert_ne!(g.daemon_pid(), before, "the daemon did not restart");
    let record = await_question(&g, &id);
    assert_eq!(record["question"]["text"], "still there?");
    assert_eq!(record["activity"], "waiting", "{record}");
    g.ok(&["answer", &id, "yes"]);
    let log = g.succeeded_log(&id);
    assert!(log.contains("answer: yes\n"), "{log}");
    assert!(log.contains("code: 0"), "{log}");
}

#[test]
fn answering_an_agent_that_does_not_ask_is_an_error_that_changes_nothing() {
    let g = Grove::new();
    let (quiet, gate) = g.spawn_gated(&["--session", "quiet"], "", "");
    let before = history(&g, "quiet");
    g.run(&["answer", &quiet, "hello"])
        .assert_exit(2, &["does not ask anything"]);
    assert_eq!(g.record(&quiet)["answer"], Value::Null);
    fs::write(&gate, "").expect("gate");
    g.succeeded_log(&quiet);
    assert_eq!(history(&g, "quiet"), before);

    // An agent killed while it asks: its question goes with it.
    let id = spawn_asking(&g, "gone", &[], &asking("'wait for me?'"));
    g.ok(&["kill", &id]);
    let record = g.wait(&id);
    assert!(record["question"].is_null(), "{record}");
    g.run(&["answer", &id, "yes"])
        .assert_exit(2, &["does not ask anything", "killed"]);
    assert!(decisions(&g, "gone").is_empty());
}

#[test]
fn bad_questions_are_refused_before_anything_is_asked() {
    let g = Grove::new();
    g.run(&["ask", "from the user's shell"])
        .assert_exit(2, &["only an agent asks"]);
    let bin = bin_env();
    let script = r#""$GROVE_BIN" ask --choices yes,yes 'twice?' 2>&1; echo "twice: $?"
        "$GROVE_BIN" ask '' 2>&1; echo "empty: $?""#;
    let id = g.spawn(&["--session", "bad", "--env", &bin], script);
    let log = g.succeeded_log(&id);
    assert!(
        log.contains("twice: 2") && log.contains("given twice"),
        "{log}"
    );
    assert!(
        log.contains("empty: 2") && log.contains("question is empty"),
        "{log}"
    );
    assert!(g.record(&id)["question"].is_null());
}

/// A parent agent drives `grove mcp` (newline-delimited JSON-RPC on its stdio) and
/// answers its child's question with the `answer_agent` tool: the server runs in the
/// parent's process tree, so it answers as the parent.
const MCP_PARENT: &str = r#"
import json, os, subprocess, sys
grove = os.environ["GROVE_BIN"]
child = subprocess.run([grove, "spawn", "--", "sh", "-c", sys.argv[1]],
                       capture_output=True, text=True, check=True).stdout.strip()
print("asker:", child, flush=True)
subprocess.run([grove, "wait", "--until", "waiting", child], check=True,
               stdout=subprocess.DEVNULL)
mcp = subprocess.Popen([grove, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True)
def send(message):
    mcp.stdin.write(json.dumps(message) + "\n")
    mcp.stdin.flush()
def answer_to(id):
    for line in mcp.stdout:
        message = json.loads(line)
        if message.get("id") == id:
            return message
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-03-26", "capabilities": {},
    "clientInfo": {"name": "parent", "version": "0"}}})
answer_to(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "answer_agent", "arguments": {"id": child, "text": "ship it"}}})
print("tool:", json.dumps(answer_to(2)["result"]), flush=True)
mcp.stdin.close()
mcp.wait()
subprocess.run([grove, "wait", child], stdout=subprocess.DEVNULL)
"#;

#[test]
fn the_parent_answers_with_the_mcp_tool() {
    if !have_python3() {
        return;
    }
    let g = Grove::new();
    let script = g.write_file("mcp_parent.py", MCP_PARENT);
    let command = format!(
        "python3 {} '{}'",
        script.display(),
        asking("'ship it?'").replace('\'', r"'\''")
    );
    let bin = bin_env();
    let parent = g.spawn(&["--session", "mcp", "--env", &bin], &command);
    let log = g.succeeded_log(&parent);
    let printed = |label: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} in {log}"))
            .trim()
            .to_string()
    };
    let tool: Value = serde_json::from_str(&printed("tool: ")).expect("tool result");
    assert_ne!(tool["isError"], true, "{tool}");
    assert_eq!(tool["structuredContent"]["by"], parent.as_str(), "{tool}");
    let asker = printed("asker: ");
    let asker_log = g.ok(&["logs", &asker]);
    assert!(asker_log.contains("answer: ship it\n"), "{asker_log}");
    let session = session_of(&g, &asker);
    assert_eq!(decisions(&g, &session)[0]["by"], parent.as_str());
}

/// The `[notify]` command hears that an agent waits, and what it asks.
#[test]
fn the_notify_hook_tells_the_question() {
    let g = Grove::new();
    let out = g.dir.path().join("notified");
    g.write_config(format!(
        "[notify]\ncommand = [\"sh\", \"-c\", \"env | grep ^GROVE_ | sort >> {0}; echo --- >> {0}\"]\n\
         events = [\"waiting\"]\nwindow = \"100ms\"\ndesktop = false\n",
        out.display()
    ));
    let id = spawn_asking(&g, "told", &[], &asking("'rename the module?'"));
    let mut told = String::new();
    eventually("the notify command to run", Duration::from_secs(20), || {
        told = fs::read_to_string(&out).unwrap_or_default();
        told.contains("---")
    });
    assert!(told.contains(&format!("GROVE_AGENT_ID={id}")), "{told}");
    assert!(told.contains("GROVE_EVENT=waiting"), "{told}");
    assert!(told.contains("GROVE_QUESTION=rename the module?"), "{told}");
    assert!(
        told.contains(&format!(
            "GROVE_SUMMARY=agent {id} asks: rename the module?"
        )),
        "{told}"
    );
    g.ok(&["answer", &id, "no"]);
    g.succeeded_log(&id);
}

//! What a parent program sees: pushed events, wait any/all with reports, logs and diffs
//! over the socket, and the authority of connections from inside agents.

mod support;

use serde_json::{json, Value};
use std::fs;
use support::*;

#[test]
fn events_arrive_in_order_and_can_be_filtered_by_agent() {
    let g = Grove::new();
    let mut all = client(&g);
    assert_eq!(
        call(&mut all, "events.subscribe", json!({})).expect("sub")["subscribed"],
        true
    );
    let (id, gate) = g.spawn_gated(&["--session", "ev"], "echo hi > hi.txt", "");
    let mut one = client(&g);
    call(&mut one, "events.subscribe", json!({"agent": id})).expect("sub");
    // Only now may the agent end: the filtered subscriber must see it exit.
    fs::write(&gate, "").expect("gate");
    g.wait(&id);
    let mut methods = Vec::new();
    while methods.last().map(String::as_str) != Some("agent.collected") {
        let note = all.next_notification().expect("event");
        if note.params["id"] == id.as_str() {
            methods.push(note.method.clone());
        }
    }
    assert_eq!(
        methods,
        ["agent.started", "agent.exited", "agent.collected"]
    );
    let removed = all.next_notification().expect("removal");
    assert_eq!(removed.method, "janitor.removed");
    assert_eq!(removed.params["agent_id"], id.as_str());
    // The filtered subscriber subscribed after the start, so it sees exit and collect.
    assert_eq!(one.next_notification().expect("e").method, "agent.exited");
    let collected = one.next_notification().expect("e");
    assert_eq!(collected.method, "agent.collected");
    assert_eq!(collected.params["branch"], format!("grove/{id}").as_str());
    assert_eq!(collected.params["files_changed"], 1);
}

#[test]
fn a_slow_subscriber_is_told_it_lagged() {
    let g = Grove::new().with_env(&[("GROVE_TEST_EVENT_BACKLOG", "8")]);
    let mut slow = client(&g);
    call(&mut slow, "events.subscribe", json!({"session": "busy"})).expect("sub");
    let mut creator = client(&g);
    call(
        &mut creator,
        "session.create",
        json!({"name": "busy", "schema": {"version": 1, "channels": {"n": {"reducer": "add"}}}}),
    )
    .expect("create");
    // Big enough that the socket and the connection's queue fill up before we read;
    // eight writers at once so that group commit keeps this quick.
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                let mut writer = client(&g);
                for _ in 0..400 {
                    let update =
                        json!({"session": "busy", "writes": [{"channel": "n", "value": 1}]});
                    call(&mut writer, "state.update", update).expect("update");
                }
            });
        }
    });
    let mut last = 0;
    loop {
        let note = slow.next_notification().expect("event");
        match note.method.as_str() {
            "events.lagged" => {
                assert!(note.params["missed"].as_u64() > Some(0));
                assert!(note.params["resync"]
                    .as_str()
                    .unwrap_or("")
                    .contains("agent.list"));
                break;
            }
            "state.updated" => {
                let checkpoint = note.params["checkpoint"].as_u64().expect("checkpoint");
                assert!(checkpoint > last, "in order");
                last = checkpoint;
            }
            other => panic!("unexpected {other}"),
        }
        assert!(last < 3200, "never told it lagged");
    }
}

#[test]
fn wait_any_and_all_return_results_with_reports() {
    let g = Grove::new();
    let gate = g.dir.path().join("gate");
    let fast = g.spawn(
        &["--env", &format!("GROVE_BIN={BIN}")],
        r#"echo fast > fast.txt; "$GROVE_BIN" report "fixed the fast thing""#,
    );
    let slow = g.spawn(
        &[],
        &format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display()),
    );
    let mut c = client(&g);
    let any = call(
        &mut c,
        "agent.wait",
        json!({"ids": [fast, slow], "mode": "any"}),
    )
    .expect("any");
    let agents = any["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["id"], fast.as_str());
    assert_eq!(agents[0]["report"], "fixed the fast thing");
    assert_eq!(agents[0]["head_commit"].as_str().map(str::len), Some(40));
    fs::write(&gate, "").expect("gate");
    let all = call(&mut c, "agent.wait", json!({"ids": [fast, slow]})).expect("all");
    assert_eq!(all["agents"][1]["status"], "collected");
    let out = g.ok(&["wait", &fast]);
    assert!(out.contains("report: fixed the fast thing"), "{out}");
    assert!(g.ok(&["show", &fast]).contains("fixed the fast thing"));
    let review = g.ok(&["review", &fast]);
    assert!(review.contains("report   fixed the fast thing"), "{review}");
    // The user may report for an agent too, by id.
    g.ok(&["report", "--id", &slow, "looked fine"]);
    assert_eq!(g.record(&slow)["report"], "looked fine");
}

#[test]
fn logs_and_diff_over_the_socket() {
    let g = Grove::new();
    let id = g.spawn(&[], "echo line1; echo line2; echo changed >> README.md");
    g.wait(&id);
    let mut c = client(&g);
    let logs = call(&mut c, "agent.logs", json!({"id": id, "offset": 6})).expect("logs");
    assert_eq!(logs["text"], "line2\n");
    assert_eq!(logs["next_offset"], 12);
    assert_eq!(logs["complete"], true);
    let diff = call(&mut c, "agent.diff", json!({"id": id})).expect("diff");
    assert!(diff["diff"].as_str().expect("diff").contains("+changed"));
    assert_eq!(
        diff["diff"].as_str(),
        Some(g.git(&["diff", &format!("main...grove/{id}")]).as_str())
    );
    let stat = call(&mut c, "agent.diff", json!({"id": id, "stat": true})).expect("stat");
    assert!(stat["diff"]
        .as_str()
        .expect("stat")
        .contains("1 file changed"));
}

/// A Python program run as an agent: it talks to the socket directly (no CLI, no token)
/// and writes what each call answered to `out`.
const PROBE: &str = r#"
import json, os, socket, sys
out, sibling, other = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["GROVE_SOCKET"]); f = s.makefile("rw")
def call(method, params):
    f.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n"); f.flush()
    return json.loads(f.readline())
call("hello", {"protocol": 1})
results = {
  "kill_sibling": call("agent.kill", {"id": sibling}),
  "read_other_session": call("state.get", {"session": other}),
  "write_other_session": call("state.update", {"session": other, "writes": [{"channel": "n", "value": 1}]}),
  "logs_of_sibling": call("agent.logs", {"id": sibling}),
  "gc": call("janitor.gc", {"dry_run": True}),
  "stop_daemon": call("daemon.stop", {}),
  "own_state": call("state.update", {"writes": [{"channel": "n", "value": 2}]}),
  "list": call("agent.list", {"all": True}),
}
json.dump(results, open(out, "w"))
"#;

#[test]
fn an_agent_connecting_directly_may_not_touch_what_is_not_its_own() {
    let g = Grove::new();
    let schema = g.write_file(
        "schema.toml",
        "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"add\" }\n",
    );
    let schema = schema.to_str().expect("utf8");
    let (sibling, _never_opened) =
        g.spawn_gated(&["--session", "other", "--schema", schema], "", "");
    let probe = g.write_file("probe.py", PROBE);
    let out = g.dir.path().join("out.json");
    let prober = g.spawn(
        &["--session", "mine", "--schema", schema],
        &format!(
            "python3 '{}' '{}' {sibling} other",
            probe.display(),
            out.display()
        ),
    );
    assert_eq!(
        g.wait(&prober)["outcome"],
        "succeeded",
        "{}",
        g.ok(&["logs", &prober])
    );
    let results: Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("out")).expect("json");
    // A sibling does not exist for the agent: answered as an unknown id would be.
    for invisible in ["kill_sibling", "logs_of_sibling"] {
        assert_eq!(
            results[invisible]["error"]["code"],
            grove_proto::codes::NOT_FOUND,
            "{invisible}: {}",
            results[invisible]
        );
        let message = results[invisible]["error"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(
            message.starts_with("no agent has an id starting with"),
            "{invisible}: {message}"
        );
    }
    for refused in [
        "read_other_session",
        "write_other_session",
        "gc",
        "stop_daemon",
    ] {
        assert_eq!(
            results[refused]["error"]["code"], -32008,
            "{refused}: {}",
            results[refused]
        );
        assert!(
            results[refused]["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(&prober),
            "{refused}: {}",
            results[refused]
        );
    }
    assert_eq!(results["own_state"]["result"]["session"], "mine");
    assert_eq!(
        results["list"]["result"]["agents"],
        json!([]),
        "an agent sees only its children"
    );
    // The sibling still runs; the same calls from the user's shell succeed.
    assert_eq!(g.status(&sibling), "running");
    let mut c = client(&g);
    call(
        &mut c,
        "state.update",
        json!({"session": "other", "writes": [{"channel": "n", "value": 1}]}),
    )
    .expect("user writes");
    assert_eq!(
        call(&mut c, "state.get", json!({"session": "other"})).expect("get")["state"]["n"],
        1
    );
    call(&mut c, "agent.kill", json!({"id": sibling})).expect("user kills");
    assert_eq!(g.wait(&sibling)["outcome"], "killed");
}

#[test]
fn agents_spawn_children_up_to_the_depth_limit_and_kill_takes_them_along() {
    let g = Grove::new().with_env(&[("GROVE_MAX_DEPTH", "1")]);
    let dir = g.dir.path().display().to_string();
    // The parent spawns a child; the child tries to spawn a grandchild (depth 2: refused).
    let script = format!(
        r#"child=$("$GROVE_BIN" spawn --env GROVE_BIN="$GROVE_BIN" -- sh -c '"$GROVE_BIN" spawn -- true 2> {dir}/grandchild.err; echo $? > {dir}/grandchild.code; sleep 300')
           echo $child > {dir}/child.id
           "$GROVE_BIN" --json list > {dir}/parent.list
           sleep 300"#
    );
    let parent = g.spawn(&["--env", &format!("GROVE_BIN={BIN}")], &script);
    let child_file = g.dir.path().join("child.id");
    // A file the shell redirects into exists before anything is written to it: wait
    // for what it holds, not for the file.
    let written =
        |name: &str| fs::read_to_string(g.dir.path().join(name)).is_ok_and(|s| s.ends_with('\n'));
    eventually("child spawned", std::time::Duration::from_secs(30), || {
        fs::read_to_string(&child_file).is_ok_and(|s| s.trim().len() == 8)
            && written("grandchild.code")
            && written("parent.list")
    });
    let child = fs::read_to_string(&child_file)
        .expect("child")
        .trim()
        .to_string();
    let record = g.record(&child);
    assert_eq!(record["parent"], parent.as_str());
    assert_eq!(record["depth"], 1);
    let refused = fs::read_to_string(g.dir.path().join("grandchild.err")).expect("err");
    assert!(refused.contains("the limit is 1 (max_depth)"), "{refused}");
    assert_eq!(
        fs::read_to_string(g.dir.path().join("grandchild.code"))
            .expect("code")
            .trim(),
        "4"
    );
    let seen: Value =
        serde_json::from_str(&fs::read_to_string(g.dir.path().join("parent.list")).expect("list"))
            .expect("json");
    assert_eq!(
        seen["agents"][0]["id"],
        child.as_str(),
        "the parent lists its child"
    );
    g.json(&["kill", &parent]);
    assert_eq!(
        g.wait(&child)["outcome"],
        "killed",
        "the child dies with its parent"
    );
}

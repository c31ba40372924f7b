//! Shared state through a real daemon: the numbered behaviours of
//! docs/state-semantics.md that need storage, sessions or agents (17, 18, 20-24), the
//! CLI, and ten agents writing at once. (1-16 and 19 are pinned in the grove-state crate.)

mod support;

use grove_proto::Client;
use serde_json::{json, Value};
use std::fs;
use support::*;

const SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
items  = { reducer = "append" }
count  = { reducer = "add", default = 0 }
plan   = { reducer = "overwrite" }
labels = { reducer = "union" }
notes  = { reducer = "merge" }
"#;

fn update(c: &mut Client, session: &str, writes: Value) -> u64 {
    call(
        c,
        "state.update",
        json!({"session": session, "writes": writes}),
    )
    .expect("state.update")["checkpoint"]
        .as_u64()
        .expect("checkpoint")
}

fn get(c: &mut Client, session: &str, at: Option<u64>) -> Value {
    call(c, "state.get", json!({"session": session, "at": at})).expect("state.get")["state"].clone()
}

fn history(c: &mut Client, session: &str) -> Value {
    call(
        c,
        "state.history",
        json!({"session": session, "limit": 100_000}),
    )
    .expect("history")["checkpoints"]
        .clone()
}

/// The i-th batch of a deterministic workload touching every reducer.
fn batch(i: u64) -> Value {
    let mut writes = vec![
        json!({"channel": "items", "value": [i]}),
        json!({"channel": "count", "value": i % 7}),
        json!({"channel": "labels", "value": [format!("l{}", i % 5)]}),
    ];
    if i.is_multiple_of(3) {
        writes.push(json!({"channel": "plan", "value": format!("plan {i}")}));
    }
    if i.is_multiple_of(4) {
        writes.push(json!({"channel": "notes", "value": {format!("k{}", i % 3): i}}));
    }
    Value::Array(writes)
}

/// Writes `n` batches and returns the expected state after each checkpoint (index =
/// checkpoint id; [0] is the initial state), read back from the daemon as it went.
fn write_workload(c: &mut Client, session: &str, n: u64) -> Vec<Value> {
    let mut states = vec![get(c, session, None)];
    for i in 1..=n {
        assert_eq!(update(c, session, batch(i)), i);
        states.push(get(c, session, None));
    }
    states
}

#[test]
fn b17_checkpoints_have_increasing_ids_time_writer_parent_source_and_channels() {
    let (_g, mut c) = grove_with_session("s", SCHEMA);
    update(&mut c, "s", json!([{"channel": "count", "value": 1}]));
    update(
        &mut c,
        "s",
        json!([{"channel": "plan", "value": "x"}, {"channel": "items", "value": [1]}]),
    );
    let h = history(&mut c, "s");
    assert_eq!(h[0]["id"], 2);
    assert_eq!(h[1]["id"], 1);
    assert_eq!(h[0]["parent"], 1);
    assert_eq!(h[1]["parent"], Value::Null);
    assert_eq!(h[0]["writer"], "user");
    assert_eq!(h[0]["source"], "update");
    assert_eq!(h[0]["channels"], json!(["items", "plan"]));
    assert_eq!(h[0]["schema_version"], 1);
    assert!(h[0]["at_ms"].as_u64() >= h[1]["at_ms"].as_u64());
}

#[test]
fn b18_reading_a_checkpoint_gives_the_state_right_after_it() {
    let (_g, mut c) = grove_with_session("s", SCHEMA);
    // Past two snapshots (every 64 checkpoints), so reads mix snapshots and the log.
    let states = write_workload(&mut c, "s", 150);
    for (at, expected) in states.iter().enumerate() {
        assert_eq!(
            &get(&mut c, "s", Some(at as u64)),
            expected,
            "checkpoint {at}"
        );
    }
    let err = call(&mut c, "state.get", json!({"session": "s", "at": 151})).expect_err("future");
    assert!(err.message.contains("no checkpoint 151"), "{}", err.message);
    // Still exact after a fork and after compaction (for every kept checkpoint).
    call(
        &mut c,
        "state.fork",
        json!({"session": "s", "at": 70, "new_session": "f"}),
    )
    .expect("fork");
    update(&mut c, "s", batch(151));
    call(&mut c, "state.compact", json!({"session": "s", "keep": 50})).expect("compact");
    for at in 102..=150u64 {
        assert_eq!(
            &get(&mut c, "s", Some(at)),
            &states[at as usize],
            "checkpoint {at}"
        );
    }
    let err = call(&mut c, "state.get", json!({"session": "s", "at": 10})).expect_err("compacted");
    assert!(
        err.message
            .contains("compacted away; the oldest readable is 102"),
        "{}",
        err.message
    );
}

#[test]
fn b20_fork_starts_from_the_checkpoint_and_sessions_stay_apart() {
    let (_g, mut c) = grove_with_session("s", SCHEMA);
    let states = write_workload(&mut c, "s", 10);
    let fork = call(
        &mut c,
        "state.fork",
        json!({"session": "s", "at": 4, "new_session": "f"}),
    )
    .expect("fork");
    assert_eq!(fork["forked_from"], "s");
    assert_eq!(fork["forked_at"], 4);
    assert_eq!(get(&mut c, "f", None), states[4]);
    let first = &history(&mut c, "f")[0];
    assert_eq!(first["source"], "fork");
    assert_eq!(first["parent"], 4);
    assert_eq!(first["parent_session"], "s");
    update(
        &mut c,
        "f",
        json!([{"channel": "items", "value": ["only in f"]}]),
    );
    update(
        &mut c,
        "s",
        json!([{"channel": "items", "value": ["only in s"]}]),
    );
    let f_items = get(&mut c, "f", None)["items"].clone();
    let s_items = get(&mut c, "s", None)["items"].clone();
    assert!(f_items.as_array().expect("f").contains(&json!("only in f")));
    assert!(!f_items.as_array().expect("f").contains(&json!("only in s")));
    assert!(!s_items.as_array().expect("s").contains(&json!("only in f")));
    // The old history is untouched.
    assert_eq!(history(&mut c, "s").as_array().map(Vec::len), Some(11));
    let dup = call(
        &mut c,
        "state.fork",
        json!({"session": "s", "at": 1, "new_session": "f"}),
    );
    assert!(dup.expect_err("exists").message.contains("already exists"));
}

#[test]
fn b21_compaction_keeps_the_current_and_the_last_k_states() {
    let (g, mut c) = grove_with_session("s", SCHEMA);
    let states = write_workload(&mut c, "s", 90);
    let done = call(&mut c, "state.compact", json!({"session": "s", "keep": 20})).expect("compact");
    assert_eq!(done["oldest"], 71);
    assert_eq!(done["dropped"], 70);
    assert_eq!(get(&mut c, "s", None), states[90]);
    for at in 71..=90 {
        assert_eq!(get(&mut c, "s", Some(at)), states[at as usize]);
    }
    assert_eq!(history(&mut c, "s").as_array().map(Vec::len), Some(20));
    // Writing on after compaction works from the same state.
    assert_eq!(update(&mut c, "s", batch(91)), 91);
    let info = g.json(&["session", "show", "s"]);
    assert_eq!(info["checkpoints"], 21);
    let out = g.ok(&["state", "compact", "--session", "s", "--keep", "5"]);
    assert!(out.contains("oldest readable is 87"), "{out}");
}

#[test]
fn b22_a_newer_stored_schema_version_is_refused_not_misread() {
    let (g, mut c) = grove_with_session("s", SCHEMA);
    update(&mut c, "s", json!([{"channel": "count", "value": 1}]));
    drop(c);
    g.alter_stopped_db("UPDATE sessions SET schema_version = 99 WHERE name = 's'");
    session_s_is_refused(
        &g,
        "state schema version 99, newer than this grove understands (1)",
        "newer than this grove understands",
    );
}

/// Session `s` can be neither read nor written: the read fails saying `read_says`, the
/// write `write_says`.
fn session_s_is_refused(g: &Grove, read_says: &str, write_says: &str) {
    g.fails(&["state", "get", "--session", "s"], &[read_says]);
    let out = g.run(&["state", "update", "--session", "s", "count", "1"]);
    assert!(out.stderr.contains(write_says), "{}", out.stderr);
}

#[test]
fn a_stored_schema_that_cannot_be_read_is_refused_and_the_rest_still_serves() {
    let (g, mut c) = grove_with_session("s", SCHEMA);
    create_session(&mut c, "t", SCHEMA);
    update(&mut c, "s", json!([{"channel": "count", "value": 1}]));
    update(&mut c, "t", json!([{"channel": "count", "value": 2}]));
    drop(c);
    g.alter_stopped_db("UPDATE sessions SET schema = '{\"channels\": 7}' WHERE name = 's'");
    session_s_is_refused(&g, "stored schema this grove cannot read", "cannot read");
    let t = g.json(&["state", "get", "--session", "t"]);
    assert_eq!(t["state"]["count"], 2, "{t}");
    let db = rusqlite::Connection::open(g.home.join("grove.db")).expect("db");
    let checkpoints: i64 = db
        .query_row(
            "SELECT count(*) FROM checkpoints WHERE session = 's'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(checkpoints, 1, "the unreadable session's data is kept");
}

#[test]
fn b23_a_crash_loses_no_acknowledged_batch() {
    let (g, mut c) = grove_with_session("s", SCHEMA);
    let states = write_workload(&mut c, "s", 100);
    let before = history(&mut c, "s");
    drop(c);
    g.crash_daemon();
    let mut c = client(&g);
    assert_eq!(get(&mut c, "s", None), states[100]);
    assert_eq!(history(&mut c, "s"), before);
    assert_eq!(get(&mut c, "s", Some(37)), states[37]);
    assert_eq!(update(&mut c, "s", batch(101)), 101);
}

#[test]
fn b24_an_agent_writes_only_its_own_session() {
    let g = Grove::new();
    commit_schema(&g, SCHEMA);
    let mut c = client(&g);
    create_session(&mut c, "other", SCHEMA);
    let result = g.dir.path().join("result");
    let script = format!(
        r#""$GROVE_BIN" state update count 5 || exit 1
           "$GROVE_BIN" state update --session other count 1 2> '{r}.other'; echo $? > '{r}.code'
           "$GROVE_BIN" state get count > '{r}.own'"#,
        r = result.display()
    );
    let id = spawn_in_session(&g, "mine", &script);
    assert_eq!(
        g.wait(&id)["outcome"],
        "succeeded",
        "{}",
        g.ok(&["logs", &id])
    );
    let code = fs::read_to_string(result.with_extension("code")).expect("code");
    assert_eq!(code.trim(), "4", "refused (exit 4)");
    let why = fs::read_to_string(result.with_extension("other")).expect("stderr");
    assert!(
        why.contains(&format!("agent {id} may use only its own session `mine`")),
        "{why}"
    );
    assert_eq!(
        fs::read_to_string(result.with_extension("own"))
            .expect("own")
            .trim(),
        "5"
    );
    assert_eq!(get(&mut c, "other", None)["count"], 0);
    assert_eq!(history(&mut c, "mine")[0]["writer"], id.as_str());
    // The user's shell may write any session.
    g.state_update("other", &["count", "2"]);
    assert_eq!(get(&mut c, "other", None)["count"], 2);
}

#[test]
fn ten_agents_writing_a_hundred_updates_each_lose_nothing() {
    let g = Grove::new();
    fs::write(g.repo.join(".grove.toml"), SCHEMA).expect("schema");
    let script = r#"i=0
        while [ $i -lt 100 ]; do
          "$GROVE_BIN" state update items "[\"$GROVE_AGENT_ID-$i\"]" count 1 labels "[\"v$((i % 10))\", \"$GROVE_AGENT_ID\"]" || exit 1
          i=$((i + 1))
        done"#;
    let ids: Vec<String> = (0..10)
        .map(|_| spawn_in_session(&g, "swarm", script))
        .collect();
    let mut args = vec!["wait"];
    args.extend(ids.iter().map(String::as_str));
    let out = g.run(&args);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let state = g.json(&["state", "get", "--session", "swarm"])["state"].clone();
    let items = state["items"].as_array().expect("items");
    assert_eq!(items.len(), 1000);
    let distinct: std::collections::HashSet<&Value> = items.iter().collect();
    assert_eq!(distinct.len(), 1000);
    assert_eq!(state["count"], 1000);
    let labels: std::collections::HashSet<String> = each(&state, "labels")
        .map(|v| v.as_str().expect("label").to_string())
        .collect();
    let mut expected: std::collections::HashSet<String> =
        (0..10).map(|i| format!("v{i}")).collect();
    expected.extend(ids.iter().cloned());
    assert_eq!(labels, expected);
    let shown = g.json(&["session", "show", "swarm"]);
    assert_eq!(shown["head"], 1000);
    // Past `checkpoint_keep` (400) the older checkpoints are compacted.
    let kept = shown["checkpoints"].as_u64().expect("checkpoints");
    assert!((400..=464).contains(&kept), "{shown}");
}

#[test]
fn schema_errors_name_the_file_and_line_and_leave_nothing_behind() {
    let g = Grove::new();
    fs::write(
        g.repo.join(".grove.toml"),
        "[state]\nversion = 1\n[state.channels]\nx = { reducer = \"average\" }\n",
    )
    .expect("write");
    g.refused_all(&["spawn", "--", "true"], &[".grove.toml:4:", "average"]);
    let bad = g.write_file("bad.toml", "[state]\nversion = 1\n[state.channels\n");
    g.refused(
        &[
            "spawn",
            "--schema",
            bad.to_str().expect("utf8"),
            "--",
            "true",
        ],
        "bad.toml:3:",
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], json!([]));
    assert_eq!(g.json(&["session", "list"])["sessions"], json!([]));
    assert!(g.worktree_dirs().is_empty());
}

#[test]
fn cli_updates_from_pairs_and_files_watch_and_conflicts() {
    let g = Grove::new();
    let schema = g.write_file("schema.toml", SCHEMA);
    g.session_by_spawn("cli", &schema);
    let mut watcher = g
        .command()
        .args(["--json", "state", "watch", "--session", "cli"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("watch");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        watcher.stdout.take().expect("stdout"),
    ));
    // The first line says the watcher is subscribed; updates after it all show up.
    let subscribed: Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    assert_eq!(subscribed["session"], "cli");
    g.state_update("cli", &["count", "1"]);
    let seen = lines.next().map(|l| l.expect("read"));
    let first: Value = serde_json::from_str(&seen.expect("a notification")).expect("json");
    assert_eq!(first["method"], "state.updated");
    let batches = g.write_file("batches.ndjson", "{\"items\": [\"a\"], \"plan\": \"p1\"}\n{\"writes\": [{\"channel\": \"labels\", \"value\": [\"x\"]}]}\n");
    let out = g.state_update("cli", &["--file", batches.to_str().expect("utf8")]);
    assert_eq!(out.lines().count(), 2, "{out}");
    let next: Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    assert_eq!(next["params"]["channels"], json!(["items", "plan"]));
    let _ = watcher.kill();
    let _ = watcher.wait();

    let plan_at = g.json(&["state", "history", "--session", "cli", "--limit", "1"])["checkpoints"]
        [0]["id"]
        .as_u64()
        .expect("id");
    // Another writer (an agent of the session) changes `plan` after that checkpoint.
    let agent = spawn_in_session(
        &g,
        "cli",
        r#""$GROVE_BIN" state update plan '"agent plan"'"#,
    );
    assert_eq!(g.wait(&agent)["outcome"], "succeeded");
    g.fails(
        &[
            "state",
            "update",
            "--session",
            "cli",
            "--base",
            &(plan_at - 1).to_string(),
            "plan",
            "\"mine\"",
        ],
        &["plan"],
    );
    assert_eq!(
        g.json(&["state", "get", "--session", "cli", "plan"])["state"],
        "agent plan"
    );
    g.refused(
        &["state", "update", "--session", "cli", "count", "not json"],
        "is not JSON",
    );
}

/// Behaviour 39 on a real daemon: two agents report findings per file into a `merge`
/// channel declared `same_key = "merge"`; their nested objects are merged, where the
/// default `"replace"` would keep only the second agent's object for the file. A replay
/// of the history reads the same (a checkpoint before the second write).
#[test]
fn b39_a_deep_merge_channel_merges_nested_objects() {
    let schema = r#"
[state]
version = 1
[state.channels]
findings = { reducer = "merge", same_key = "merge" }
"#;
    let (g, mut c) = grove_with_session("deep", schema);
    let first = spawn_in_session(
        &g,
        "deep",
        r#""$GROVE_BIN" state update findings '{"a.rs": {"lint": 2, "notes": {"x": 1}}}'"#,
    );
    g.succeeded_log(&first);
    let second = spawn_in_session(
        &g,
        "deep",
        r#""$GROVE_BIN" state update findings '{"a.rs": {"tests": 5, "notes": {"y": 2}}, "b.rs": 1}'"#,
    );
    g.succeeded_log(&second);
    let merged = json!({"a.rs": {"lint": 2, "tests": 5, "notes": {"x": 1, "y": 2}}, "b.rs": 1});
    assert_eq!(get(&mut c, "deep", None)["findings"], merged);
    assert_eq!(
        get(&mut c, "deep", Some(1))["findings"],
        json!({"a.rs": {"lint": 2, "notes": {"x": 1}}})
    );
    // A non-object replaces an object, as any other value does.
    update(
        &mut c,
        "deep",
        json!([{"channel": "findings", "value": {"a.rs": "gone"}}]),
    );
    assert_eq!(get(&mut c, "deep", None)["findings"]["a.rs"], "gone");
    g.refused(
        &["state", "update", "--session", "deep", "findings", "[1]"],
        "findings",
    );
}

/// Behaviour 31 on a real daemon: agents claim files in a `merge` channel that refuses a
/// held key; the second claim of one file is refused as a conflict (exit 4 inside the
/// agent, -32011 on the socket) naming the key and its holder, and changes nothing.
#[test]
fn b31_a_merge_channel_refusing_same_keys_keeps_the_first_claim() {
    let schema = r#"
[state]
version = 1
[state.channels]
claims = { reducer = "merge", same_key = "refuse" }
"#;
    let (g, mut c) = grove_with_session("claims", schema);
    let first = spawn_in_session(
        &g,
        "claims",
        r#""$GROVE_BIN" state update claims "{\"a.rs\": \"$GROVE_AGENT_ID\"}""#,
    );
    g.succeeded_log(&first);
    let second = spawn_in_session(
        &g,
        "claims",
        r#""$GROVE_BIN" state update claims "{\"b.rs\": \"$GROVE_AGENT_ID\", \"a.rs\": \"$GROVE_AGENT_ID\"}"; echo "exit $?""#,
    );
    let log = g.succeeded_log(&second);
    assert!(log.contains("exit 4"), "{log}");
    assert!(log.contains("key `a.rs`") && log.contains(&first), "{log}");
    let held = call(&mut c, "state.get", json!({"session": "claims"})).expect("get");
    assert_eq!(held["state"]["claims"], json!({"a.rs": first}));
    assert_eq!(held["checkpoint"], 1, "{held}");

    let refused = call(
        &mut c,
        "state.update",
        json!({"session": "claims", "writes": [{"channel": "claims", "value": {"a.rs": "me"}}]}),
    )
    .expect_err("a held key");
    assert_eq!(refused.code, grove_proto::codes::CONFLICT, "{refused:?}");
    update(
        &mut c,
        "claims",
        json!([{"channel": "claims", "value": {"c.rs": "me"}}]),
    );
    assert_eq!(
        get(&mut c, "claims", None)["claims"],
        json!({"a.rs": first, "c.rs": "me"})
    );
}

//! Limits of sessions' shared state (issue 17, "Limits"): a write over the per-write or
//! per-session limit is refused before anything changes; every answer stays within the
//! line cap (big states and histories come in pages, which the CLI joins); at most
//! `checkpoint_keep` checkpoints per session, and pinned ones survive compaction.

mod support;

use grove_proto::Client;
use serde_json::{json, Value};
use std::fs;
use support::*;

const SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
items = { reducer = "append" }
blob  = { reducer = "overwrite" }
count = { reducer = "add", default = 0 }
"#;

fn head(c: &mut Client, session: &str) -> u64 {
    call(c, "session.show", json!({"name": session})).expect("show")["head"]
        .as_u64()
        .expect("head")
}

/// A string of `n` bytes (as JSON, 2 more for the quotes).
fn text(n: usize) -> String {
    "x".repeat(n)
}

#[test]
fn a_write_over_the_per_write_limit_is_refused_and_changes_nothing() {
    let g = Grove::new().with_env(&[("GROVE_STATE_MAX_WRITE", "4K")]);
    let mut c = client(&g);
    create_session(&mut c, "s", SCHEMA);
    g.state_update("s", &["count", "1"]);
    let big = json!(text(5000)).to_string();
    let out = g.run(&["state", "update", "--session", "s", "blob", &big]);
    assert_eq!(out.code, 4, "refused: {} {}", out.stdout, out.stderr);
    for needle in [
        "per-write limit of 4096 bytes",
        "state_max_write",
        "nothing was written",
    ] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(out.stderr.contains("the batch is 50"), "{}", out.stderr);
    // The socket refuses it the same way.
    let err = call(
        &mut c,
        "state.update",
        json!({"session": "s", "writes": [{"channel": "blob", "value": text(5000)}]}),
    )
    .expect_err("refused");
    assert_eq!(err.code, grove_proto::codes::REFUSED);
    assert!(err.message.contains("state_max_write"), "{}", err.message);
    assert_eq!(head(&mut c, "s"), 1);
    let state: Value =
        serde_json::from_str(&g.ok(&["state", "get", "--session", "s"])).expect("json");
    assert_eq!(state, json!({"items": [], "blob": null, "count": 1}));
}

#[test]
fn an_agent_cannot_grow_its_session_past_the_limit() {
    let g = Grove::new().with_env(&[
        ("GROVE_STATE_MAX_WRITE", "4K"),
        ("GROVE_STATE_MAX_SESSION", "16K"),
    ]);
    commit_schema(&g, SCHEMA);
    let result = g.dir.path().join("result");
    // The agent appends 3 KB items until it is refused, then tries a bigger one.
    let item = json!([text(3000)]).to_string();
    let script = format!(
        r#"n=0
           while :; do
             "$GROVE_BIN" state update items '{item}' 2> '{r}.err'; rc=$?
             [ $rc -ne 0 ] && break
             n=$((n+1)); [ $n -gt 20 ] && break
           done
           echo "$rc $n" > '{r}.code'"#,
        r = result.display()
    );
    let id = spawn_in_session(&g, "mine", &script);
    g.wait(&id);
    let code = fs::read_to_string(result.with_extension("code")).expect("code");
    let (exit, accepted) = code.trim().split_once(' ').expect("two numbers");
    assert_eq!(exit, "4", "refused with exit 4");
    let accepted: u64 = accepted.parse().expect("count");
    assert!((4..=5).contains(&accepted), "{accepted} writes fit in 16K");
    let why = fs::read_to_string(result.with_extension("err")).expect("stderr");
    for needle in [
        "per-session limit of 16384 bytes",
        "state_max_session",
        "session `mine`",
    ] {
        assert!(why.contains(needle), "{needle}: {why}");
    }
    let mut c = client(&g);
    assert_eq!(
        head(&mut c, "mine"),
        accepted,
        "nothing of the refused write stayed"
    );
    let shown = call(&mut c, "session.show", json!({"name": "mine"})).expect("show");
    assert!(
        shown["state_bytes"].as_u64().expect("bytes") <= 16384,
        "{shown}"
    );
    // A write that shrinks the state is taken.
    g.state_update("mine", &["items", r#"{"__overwrite__": []}"#]);
    g.state_update("mine", &["items", &item]);
}

#[test]
fn a_state_over_the_line_cap_reads_whole_in_pages_even_when_stored_before_the_limit() {
    // Stored while the limits were far higher (as before they existed): 3 MB of state.
    let mut g = Grove::new().with_env(&[
        ("GROVE_STATE_MAX_WRITE", "1G"),
        ("GROVE_STATE_MAX_SESSION", "1G"),
    ]);
    let mut c = client(&g);
    create_session(&mut c, "s", SCHEMA);
    let chunk = format!("\"quoted\"\n\u{1}é{}", text(500_000));
    for _ in 0..6 {
        call(
            &mut c,
            "state.update",
            json!({"session": "s", "writes": [{"channel": "items", "value": [chunk]}]}),
        )
        .expect("update");
    }
    drop(c);
    g.ok(&["daemon", "stop"]);
    g.env.clear();
    let expected = json!({"items": vec![chunk.clone(); 6], "blob": null, "count": 0});
    // The default limits now: reading it whole still works, now and at a checkpoint.
    let now: Value =
        serde_json::from_str(&g.ok(&["state", "get", "--session", "s"])).expect("json");
    assert_eq!(now, expected);
    let at4: Value =
        serde_json::from_str(&g.ok(&["state", "get", "--session", "s", "--at", "4", "items"]))
            .expect("json");
    assert_eq!(at4, json!(vec![chunk.clone(); 4]));
    // Over the socket each answer is a page within the line cap.
    let mut c = client(&g);
    let first = call(&mut c, "state.get", json!({"session": "s"})).expect("page");
    assert_eq!(first["state"], Value::Null);
    assert!(
        first["page"]["next"].as_u64().is_some(),
        "{}",
        first["page"]["bytes"]
    );
    assert!(first.to_string().len() < grove_proto::MAX_LINE_BYTES);
    let err = call(
        &mut c,
        "state.get",
        json!({"session": "s", "offset": 1u64 << 40}),
    )
    .expect_err("bad offset");
    assert!(err.message.contains("page.next"), "{}", err.message);
    // It may not grow, but it may shrink.
    let out = g.run(&["state", "update", "--session", "s", "count", "1"]);
    assert_eq!(out.code, 0, "a write that does not grow it: {}", out.stderr);
    let out = g.run(&["state", "update", "--session", "s", "items", "[1]"]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    g.state_update("s", &["items", r#"{"__overwrite__": []}"#]);
}

#[test]
fn a_long_history_comes_in_pages_and_the_cli_reads_them_all() {
    // All 500 stay readable: none is compacted (the default keeps 400).
    let g = Grove::new().with_env(&[("GROVE_CHECKPOINT_KEEP", "500")]);
    let mut c = client(&g);
    // Forty long channel names written by every batch make each history row about
    // 3 KB: 500 rows are past the line cap.
    let names: Vec<String> = (0..40).map(|n| format!("c{n:02}_{}", text(60))).collect();
    let channels: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"reducer": "add"})))
        .collect();
    call(
        &mut c,
        "session.create",
        json!({"name": "s", "schema": {"version": 1, "channels": channels}}),
    )
    .expect("session.create");
    let writes: Vec<Value> = names
        .iter()
        .map(|n| json!({"channel": n, "value": 1}))
        .collect();
    for _ in 0..500 {
        call(
            &mut c,
            "state.update",
            json!({"session": "s", "writes": writes}),
        )
        .expect("update");
    }
    let first = call(
        &mut c,
        "state.history",
        json!({"session": "s", "limit": 100_000}),
    )
    .expect("history");
    assert!(first.to_string().len() < grove_proto::MAX_LINE_BYTES);
    let rows = first["checkpoints"].as_array().expect("rows").len();
    assert!(rows < 500, "one page holds {rows}");
    let next = first["next"].as_u64().expect("next");
    assert_eq!(next, 500 - rows as u64 + 1);
    let rest = call(
        &mut c,
        "state.history",
        json!({"session": "s", "limit": 100_000, "before": next}),
    )
    .expect("page 2");
    assert_eq!(rest["checkpoints"][0]["id"], next - 1);
    let all = g.json(&["state", "history", "--session", "s", "--limit", "100000"]);
    let ids: Vec<u64> = each(&all, "checkpoints")
        .map(|r| r["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids, (1..=500).rev().collect::<Vec<u64>>());
    let some = g.json(&["state", "history", "--session", "s", "--limit", "450"]);
    assert_eq!(some["checkpoints"].as_array().expect("rows").len(), 450);
}

#[test]
fn checkpoints_past_checkpoint_keep_are_compacted_and_pinned_ones_stay() {
    let g = Grove::new().with_env(&[("GROVE_CHECKPOINT_KEEP", "10")]);
    let mut c = client(&g);
    create_session(&mut c, "s", SCHEMA);
    for n in 1..=5 {
        g.state_update("s", &["count", &n.to_string()]);
    }
    let pinned = g.ok(&["state", "pin", "--session", "s", "3"]);
    assert!(pinned.contains("pinned checkpoint 3 of s"), "{pinned}");
    for _ in 6..=200 {
        call(
            &mut c,
            "state.update",
            json!({"session": "s", "writes": [{"channel": "count", "value": 1}]}),
        )
        .expect("update");
    }
    let shown = call(&mut c, "session.show", json!({"name": "s"})).expect("show");
    let readable = shown["checkpoints"].as_u64().expect("checkpoints");
    assert!((10..=10 + 64).contains(&readable), "{shown}");
    assert!(shown["oldest"].as_u64().expect("oldest") > 100, "{shown}");
    // The pinned checkpoint reads as it was: 1 + 2 + 3.
    let at3 = g.ok(&["state", "get", "--session", "s", "--at", "3", "count"]);
    assert_eq!(at3.trim(), "6");
    let err = call(&mut c, "state.get", json!({"session": "s", "at": 4})).expect_err("gone");
    assert!(err.message.contains("compacted away"), "{}", err.message);
    // The newest state is intact: 15 + 195.
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        "210"
    );
    // The pin survives a restart; unpinned, the checkpoint goes.
    g.ok(&["daemon", "restart"]);
    let mut c = client(&g);
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "--at", "3", "count"])
            .trim(),
        "6"
    );
    let out = g.run(&["state", "pin", "--session", "s", "4"]);
    assert_eq!(
        out.code, 2,
        "a compacted checkpoint cannot be pinned: {}",
        out.stderr
    );
    g.ok(&["state", "pin", "--session", "s", "3", "--remove"]);
    let err = call(&mut c, "state.get", json!({"session": "s", "at": 3})).expect_err("gone");
    assert!(err.message.contains("compacted away"), "{}", err.message);
    let history = g.json(&["state", "history", "--session", "s", "--limit", "1000"]);
    let oldest = history["checkpoints"]
        .as_array()
        .expect("rows")
        .last()
        .cloned();
    assert!(oldest.expect("rows")["id"].as_u64() > Some(100));
}

#[test]
fn an_agent_cannot_pin_or_unpin() {
    let g = Grove::new();
    commit_schema(&g, SCHEMA);
    let (code, _) = agent_of_session_runs(&g, "mine", "state pin --session mine 1");
    assert_eq!(code, "4");
    let mut c = client(&g);
    let pins = call(
        &mut c,
        "state.pin",
        json!({"session": "mine", "at": 1, "unpin": true}),
    )
    .expect_err("nothing pinned");
    assert!(pins.message.contains("not pinned"), "{}", pins.message);
}

#[test]
fn a_long_session_list_comes_in_pages_and_the_cli_reads_them_all() {
    let g = Grove::new();
    let mut c = client(&g);
    for n in 0..1200 {
        create_session(&mut c, &format!("s{n:04}"), SCHEMA);
    }
    let first = call(&mut c, "session.list", json!({})).expect("list");
    assert_eq!(first["sessions"].as_array().expect("page").len(), 1000);
    assert_eq!(first["next"], "s0999");
    assert!(first.to_string().len() < grove_proto::MAX_LINE_BYTES);
    let rest = call(&mut c, "session.list", json!({"after": "s0999"})).expect("page 2");
    assert_eq!(rest["sessions"].as_array().expect("page").len(), 200);
    assert!(rest.get("next").is_none(), "{}", rest["next"]);
    let all = g.json(&["session", "list"]);
    let names: Vec<&str> = each(&all, "sessions")
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    let expected: Vec<String> = (0..1200).map(|n| format!("s{n:04}")).collect();
    assert_eq!(names, expected);
}

/// Issue 34, item 9: a page of `state.get` may start at any character of the value's
/// JSON text (a resumed read needs no page table); an offset past its end, or inside a
/// character, is refused and says what to use.
#[test]
fn a_state_page_starts_at_any_character_and_nowhere_else() {
    let g = Grove::new();
    let mut c = client(&g);
    let schema = json!({"version": 1, "channels": {"plan": {"reducer": "overwrite"}}});
    call(
        &mut c,
        "session.create",
        json!({"name": "p", "schema": schema}),
    )
    .expect("create");
    let update = json!({"session": "p", "writes": [{"channel": "plan", "value": "héllo"}]});
    call(&mut c, "state.update", update).expect("update");
    let get = |c: &mut Client, offset: u64| {
        call(
            c,
            "state.get",
            json!({"session": "p", "channel": "plan", "offset": offset}),
        )
    };
    let whole = get(&mut c, 0).expect("offset 0");
    assert_eq!(whole["page"]["text"], "\"héllo\"", "{whole}");
    assert_eq!(whole["page"]["bytes"], 8, "{whole}");
    let rest = get(&mut c, 4).expect("offset 4");
    assert_eq!(rest["page"]["text"], "llo\"", "{rest}");
    for inside_or_past in [3, 9, 1 << 40] {
        let refused = get(&mut c, inside_or_past).expect_err("refused");
        assert_eq!(refused.code, grove_proto::codes::BAD_INPUT, "{refused:?}");
        assert!(refused.message.contains("page.next"), "{refused:?}");
    }
}

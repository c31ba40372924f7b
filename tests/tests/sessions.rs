//! Sessions as first-class (issue 17, "Lifecycle and GC"): `grove session rm` deletes a
//! session's head, checkpoints and snapshots, is refused while agents of it are live
//! unless forced, and leaves an audit row that `grove gc --log` lists.

mod support;

use serde_json::{json, Value};
use std::fs;
use std::path::Path;
use std::time::Duration;
use support::*;

const SCHEMA: &str = COUNTER_SCHEMA;

fn session_names(g: &Grove) -> Vec<String> {
    g.json(&["session", "list"])["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn session_rm_deletes_everything_of_it_and_keeps_an_audit_row() {
    let (g, mut c) = grove_with_session("old", SCHEMA);
    create_session(&mut c, "other", SCHEMA);
    // Past a snapshot (every 64 checkpoints), with a pin: every kind of row it has.
    for _ in 0..70 {
        call(
            &mut c,
            "state.update",
            json!({"session": "old", "writes": [{"channel": "count", "value": 1}]}),
        )
        .expect("update");
    }
    g.ok(&["state", "pin", "--session", "old", "5"]);
    g.state_update("other", &["count", "3"]);
    let out = g.ok(&["session", "rm", "old", "--reason", "done with it"]);
    assert!(out.contains("deleted session old (70 checkpoints"), "{out}");
    assert_eq!(session_names(&g), vec!["other"]);
    g.refused(&["state", "get", "--session", "old"], "no session `old`");
    // Nothing of it is left in the database, after a restart too.
    let db = g.stopped_db();
    for table in ["checkpoints", "snapshots", "pins"] {
        let n: i64 = db
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE session = 'old'"),
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(n, 0, "{table}");
    }
    drop(db);
    assert_eq!(session_names(&g), vec!["other"]);
    let log = g.json(&["gc", "--log"]);
    let row = &log["sessions"][0];
    assert_eq!(row["session"], "old");
    assert_eq!(row["by"], "user");
    assert_eq!(row["reason"], "done with it");
    assert_eq!(row["checkpoints"], 70);
    assert!(row["bytes"].as_u64() > Some(1000), "{row}");
    assert!(row["at_ms"].as_u64() > Some(0));
    let text = g.ok(&["gc", "--log"]);
    assert!(
        text.contains("old") && text.contains("done with it"),
        "{text}"
    );
    // The name is free again, and starts empty.
    let mut c = client(&g);
    create_session(&mut c, "old", SCHEMA);
    assert_eq!(
        g.ok(&["state", "get", "--session", "old", "count"]).trim(),
        "0"
    );
    let history = g.json(&["state", "history", "--session", "old"]);
    assert_eq!(history["checkpoints"], json!([]));
    // The other session is untouched.
    assert_eq!(
        g.ok(&["state", "get", "--session", "other", "count"])
            .trim(),
        "3"
    );
    g.refused(&["session", "rm", "nope"], "no session `nope`");
}

/// An agent of session `busy` that adds 1 to `count`, waits for `gate`, then runs
/// `after`; returned once its first write is seen.
fn busy_agent(g: &Grove, gate: &Path, after: &str) -> String {
    let script = format!(
        r#""$GROVE_BIN" state update count 1 || exit 1
           while [ ! -e '{gate}' ]; do sleep 0.05; done
           {after}"#,
        gate = gate.display()
    );
    let id = spawn_in_session(g, "busy", &script);
    eventually("the agent wrote", Duration::from_secs(20), || {
        g.run(&["state", "get", "--session", "busy", "count"])
            .stdout
            .trim()
            == "1"
    });
    id
}

#[test]
fn session_rm_is_refused_while_an_agent_of_it_is_live_unless_forced() {
    let g = Grove::new();
    commit_schema(&g, SCHEMA);
    let gate = g.dir.path().join("gate");
    let id = busy_agent(&g, &gate, r#""$GROVE_BIN" state update count 1"#);
    let out = g.run(&["session", "rm", "busy"]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    for needle in ["has live agents", &id, "nothing was deleted", "--force"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    assert_eq!(session_names(&g), vec!["busy"]);
    let removal = g.json(&["session", "rm", "busy", "--force"]);
    assert_eq!(removal["live_agents"], json!([id]));
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    assert_eq!(
        record["outcome"], "failed",
        "its next write fails: {record}"
    );
    assert!(session_names(&g).is_empty());
}

#[test]
fn an_agent_cannot_delete_a_session() {
    let g = Grove::new();
    commit_schema(&g, SCHEMA);
    let mut c = client(&g);
    create_session(&mut c, "victim", SCHEMA);
    let result = g.dir.path().join("result");
    let script = format!(
        r#""$GROVE_BIN" state update count 1 || exit 1
           "$GROVE_BIN" session rm victim --force 2> '{r}.victim'; echo $? > '{r}.a'
           "$GROVE_BIN" session rm mine --force 2> '{r}.mine'; echo $? > '{r}.b'"#,
        r = result.display()
    );
    let id = spawn_in_session(&g, "mine", &script);
    g.wait(&id);
    for (code, err) in [("a", "victim"), ("b", "mine")] {
        let exit = fs::read_to_string(result.with_extension(code)).expect("code");
        assert_eq!(exit.trim(), "4");
        let why = fs::read_to_string(result.with_extension(err)).expect("stderr");
        assert!(why.contains("may not delete sessions"), "{why}");
    }
    let mut names = session_names(&g);
    names.sort();
    assert_eq!(names, vec!["mine", "victim"]);
}

#[test]
fn a_crash_in_the_middle_of_session_rm_leaves_it_whole_or_gone_with_its_audit_row() {
    let g = Grove::new();
    write_session_and_stop(&g, "s", "2");
    g.crash_during("mid_session_rm", &["session", "rm", "s"]);
    // The transaction never committed: the session is whole and no audit row claims
    // otherwise.
    assert_eq!(session_names(&g), vec!["s"]);
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        "2"
    );
    let log: Value = g.json(&["gc", "--log"]);
    assert_eq!(log["sessions"], json!([]));
    g.ok(&["session", "rm", "s"]);
    assert_eq!(g.json(&["gc", "--log"])["sessions"][0]["session"], "s");
}

/// Every `session.lifecycle` event of `session`, as it arrives.
fn lifecycle_events(g: &Grove, session: &str) -> std::sync::mpsc::Receiver<Value> {
    let mut c = client(g);
    call(&mut c, "events.subscribe", json!({"session": session})).expect("subscribe");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(note) = c.next_notification() {
            if note.method == "session.lifecycle" && tx.send(note.params).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for the event that moves the session to `to`; the states passed on the way.
fn wait_for(events: &std::sync::mpsc::Receiver<Value>, to: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let event = events
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no move to {to}; saw {seen:?}"));
        let now = event["to"].as_str().expect("to").to_string();
        seen.push(now.clone());
        if now == to {
            return seen;
        }
    }
}

/// A grove whose session gc passes every 50 ms, with the session lifetimes `ages`
/// (`GROVE_SESSION_IDLE` and on).
fn aging_grove(ages: &[(&str, &str)]) -> Grove {
    Grove::new()
        .with_env(&[("GROVE_SESSION_GC_INTERVAL", "50ms")])
        .with_env(ages)
}

/// Creates the session `name`, its lifecycle events subscribed to first; the client
/// that created it and those events.
fn watched_session(
    g: &Grove,
    name: &str,
) -> (grove_proto::Client, std::sync::mpsc::Receiver<Value>) {
    let mut c = client(g);
    let events = lifecycle_events(g, name);
    create_session(&mut c, name, SCHEMA);
    (c, events)
}

/// Creates the session `name` with `count` set to `count`, then stops the daemon.
fn write_session_and_stop(g: &Grove, name: &str, count: &str) {
    create_session(&mut client(g), name, SCHEMA);
    g.state_update(name, &["count", count]);
    g.ok(&["daemon", "stop"]);
}

fn lifecycle(g: &Grove, session: &str) -> Value {
    g.json(&["session", "show", session])
}

#[test]
fn a_session_moves_from_active_to_deleted_and_its_deletion_is_audited() {
    let g = aging_grove(&[
        ("GROVE_SESSION_IDLE", "200ms"),
        ("GROVE_SESSION_SUSPEND", "500ms"),
        ("GROVE_SESSION_ARCHIVE", "900ms"),
        ("GROVE_SESSION_DELETE", "1300ms"),
    ]);
    let (_c, events) = watched_session(&g, "s");
    g.state_update("s", &["count", "4"]);
    assert_eq!(lifecycle(&g, "s")["lifecycle"], "active");
    assert_eq!(wait_for(&events, "idle"), vec!["idle"]);
    assert_eq!(wait_for(&events, "suspended"), vec!["suspended"]);
    assert_eq!(wait_for(&events, "archived"), vec!["archived"]);
    let shown = lifecycle(&g, "s");
    assert_eq!(shown["lifecycle"], "archived");
    assert_eq!(shown["in_memory"], false);
    assert_eq!(wait_for(&events, "deleted"), vec!["deleted"]);
    assert!(session_names(&g).is_empty());
    let row = &g.json(&["gc", "--log"])["sessions"][0];
    assert_eq!(row["session"], "s");
    assert_eq!(row["by"], "gc");
    assert!(
        row["reason"]
            .as_str()
            .expect("reason")
            .contains("session_delete"),
        "{row}"
    );
    assert_eq!(row["checkpoints"], 1);
}

#[test]
fn a_suspended_session_is_read_from_disk_and_made_active_by_any_read() {
    let g = aging_grove(&[
        ("GROVE_SESSION_IDLE", "100ms"),
        ("GROVE_SESSION_SUSPEND", "300ms"),
    ]);
    let (mut c, events) = watched_session(&g, "s");
    for n in 0..70 {
        call(
            &mut c,
            "state.update",
            json!({"session": "s", "writes": [{"channel": "count", "value": n}]}),
        )
        .expect("update");
    }
    wait_for(&events, "suspended");
    let shown = lifecycle(&g, "s");
    assert_eq!(
        (shown["lifecycle"].clone(), shown["in_memory"].clone()),
        (json!("suspended"), json!(false)),
        "showing a session does not use it: {shown}"
    );
    assert!(shown["state_bytes"].as_u64() > Some(0), "{shown}");
    // A read brings it back, whole.
    let sum = (0..70).sum::<u64>().to_string();
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        sum
    );
    assert_eq!(wait_for(&events, "active"), vec!["active"]);
    // A write does too, after a restart that kept it suspended.
    wait_for(&events, "suspended");
    drop(events);
    g.ok(&["daemon", "restart"]);
    assert_eq!(lifecycle(&g, "s")["lifecycle"], "suspended");
    let events = lifecycle_events(&g, "s");
    g.state_update("s", &["count", "1"]);
    assert_eq!(wait_for(&events, "active"), vec!["active"]);
    let sum = ((0..70).sum::<u64>() + 1).to_string();
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        sum
    );
}

/// A session `clock` written once now, and its lifecycle events: the passes' clock for
/// a test about another session.
fn clock_session(g: &Grove) -> std::sync::mpsc::Receiver<Value> {
    let mut c = client(g);
    create_session(&mut c, "clock", SCHEMA);
    let clock = lifecycle_events(g, "clock");
    g.state_update("clock", &["count", "1"]);
    clock
}

#[test]
fn a_session_with_a_live_agent_stays_active() {
    let g = aging_grove(&[
        ("GROVE_SESSION_IDLE", "100ms"),
        ("GROVE_SESSION_SUSPEND", "200ms"),
    ]);
    commit_schema(&g, SCHEMA);
    let gate = g.dir.path().join("gate");
    let id = busy_agent(&g, &gate, "");
    // Another session, written at the same time, is the clock: once it is suspended,
    // passes have run past every duration.
    wait_for(&clock_session(&g), "suspended");
    assert_eq!(lifecycle(&g, "busy")["lifecycle"], "active");
    fs::write(&gate, "").expect("gate");
    g.wait(&id);
}

/// state-semantics.md 26 to 28: an agent that runs past every lifetime without writing
/// keeps its session active, and the session's clock starts when the agent ends, also
/// after a restart that finds no record of the agent.
#[test]
fn a_sessions_clock_starts_when_its_last_agent_ends() {
    let (suspend, delete) = (4_000, 6_000);
    let g = aging_grove(&[
        ("GROVE_SESSION_IDLE", "300ms"),
        ("GROVE_SESSION_SUSPEND", &format!("{suspend}ms")),
        ("GROVE_SESSION_ARCHIVE", "5s"),
        ("GROVE_SESSION_DELETE", &format!("{delete}ms")),
    ]);
    commit_schema(&g, SCHEMA);
    let gate = g.dir.path().join("gate");
    let id = busy_agent(&g, &gate, "");
    // A session written after the agent's only write: once it is deleted, the agent has
    // run longer than every lifetime without writing.
    wait_for(&clock_session(&g), "deleted");
    assert_eq!(lifecycle(&g, "busy")["lifecycle"], "active");

    fs::write(&gate, "").expect("gate");
    let ended = g.wait(&id)["ended_at_ms"].as_u64().expect("ended_at_ms");
    eventually(
        "the end stored as its last use",
        Duration::from_secs(10),
        || lifecycle(&g, "busy")["last_used_ms"].as_u64() >= Some(ended),
    );
    let shown = lifecycle(&g, "busy")["lifecycle"].clone();
    assert!(shown == "active" || shown == "idle", "{shown}");

    // Only the stored last use is left to count from.
    assert!(g.alter_stopped_db("DELETE FROM agents") >= 1);
    let events = lifecycle_events(&g, "busy");
    let mut moves = Vec::new();
    while moves.last().map(|e: &Value| e["to"].clone()) != Some(json!("deleted")) {
        let event = events
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("not deleted; saw {moves:?}"));
        moves.push(event);
    }
    for event in &moves {
        let after = event["at_ms"].as_u64().expect("at_ms") - ended;
        match event["to"].as_str().expect("to") {
            "suspended" => assert!(after >= suspend, "suspended {after} ms after: {moves:?}"),
            "deleted" => assert!(after >= delete, "deleted {after} ms after: {moves:?}"),
            _ => {}
        }
    }
}

#[test]
fn at_most_session_cache_heads_stay_in_memory_least_recently_used_out() {
    let g = Grove::new().with_env(&[("GROVE_SESSION_CACHE", "2")]);
    let mut c = client(&g);
    for name in ["a", "b", "c"] {
        create_session(&mut c, name, SCHEMA);
        g.state_update(name, &["count", "1"]);
    }
    let in_memory = |g: &Grove| -> Vec<bool> {
        ["a", "b", "c"]
            .iter()
            .map(|n| lifecycle(g, n)["in_memory"].as_bool().expect("bool"))
            .collect()
    };
    assert_eq!(in_memory(&g), vec![false, true, true]);
    assert_eq!(
        g.ok(&["state", "get", "--session", "a", "count"]).trim(),
        "1"
    );
    assert_eq!(in_memory(&g), vec![true, false, true]);
    // After a restart no head is read until used.
    g.ok(&["daemon", "restart"]);
    assert_eq!(in_memory(&g), vec![false, false, false]);
    g.state_update("b", &["count", "1"]);
    assert_eq!(
        g.ok(&["state", "get", "--session", "b", "count"]).trim(),
        "2"
    );
    assert_eq!(in_memory(&g), vec![false, true, false]);
}

#[test]
fn a_crash_in_the_middle_of_a_gc_pass_loses_nothing() {
    let g = aging_grove(&[
        ("GROVE_SESSION_IDLE", "100ms"),
        ("GROVE_SESSION_SUSPEND", "200ms"),
    ]);
    write_session_and_stop(&g, "s", "5");
    // This daemon dies by SIGKILL in its first pass that moves a session, mid-transaction.
    let out = g.run_env(
        &["state", "update", "--session", "s", "count", "1"],
        &[("GROVE_TEST_CRASH_AT", "mid_session_gc")],
    );
    g.await_daemon_gone("the daemon died in the pass", Duration::from_secs(20));
    assert!(g.daemon_log().contains("mid_session_gc"), "crashed there");
    let expected = if out.code == 0 { "6" } else { "5" };
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        expected
    );
    // The next daemon moves it along as if nothing happened.
    let events = lifecycle_events(&g, "s");
    wait_for(&events, "suspended");
    assert_eq!(session_names(&g), vec!["s"]);
}

/// Sessions that cannot be read when the daemon starts: every session request is
/// refused with the cause the database gave (kept through the error, not flattened),
/// and nothing is changed; once the database is whole again, all is as it was.
#[test]
fn sessions_unreadable_at_start_are_refused_with_the_cause_and_nothing_changes() {
    let g = Grove::new();
    write_session_and_stop(&g, "kept", "2");
    let rename = |from: &str, to: &str| {
        let db = rusqlite::Connection::open(g.home.join("grove.db")).expect("open grove.db");
        db.execute_batch(&format!("ALTER TABLE {from} RENAME TO {to}"))
            .expect("rename");
    };
    // A table start-up reads (the checkpoints, for each tree's share).
    rename("checkpoints", "checkpoints_away");

    for args in [
        &["session", "list"][..],
        &["state", "update", "--session", "kept", "count", "1"],
    ] {
        let out = g.run(args);
        assert_ne!(out.code, 0, "{args:?}: {}", out.stdout);
        assert!(
            out.stderr.contains("could not read its sessions at start")
                && out.stderr.contains("no such table: checkpoints"),
            "{args:?}: {}",
            out.stderr
        );
    }

    g.ok(&["daemon", "stop"]);
    rename("checkpoints_away", "checkpoints");
    assert_eq!(session_names(&g), vec!["kept"]);
    assert_eq!(
        g.ok(&["state", "get", "--session", "kept", "count"]).trim(),
        "2"
    );
}

const NOTES_SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
notes = { reducer = "append" }
"#;

/// Bytes the history of `session` takes in the database file (its snapshots' states
/// and its checkpoints' writes, as stored), and how many of those values are packed.
fn stored_history(db: &rusqlite::Connection, session: &str) -> (i64, i64) {
    db.query_row(
        "SELECT (SELECT coalesce(sum(octet_length(state)), 0) FROM snapshots WHERE session = ?1)
              + (SELECT coalesce(sum(octet_length(writes)), 0) FROM checkpoints
                 WHERE session = ?1),
                (SELECT count(*) FROM snapshots WHERE session = ?1 AND typeof(state) = 'blob')
              + (SELECT count(*) FROM checkpoints WHERE session = ?1 AND typeof(writes) = 'blob')",
        [session],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .expect("sizes")
}

/// What a user reads of session `s`: its state now and at two older checkpoints (one
/// from a snapshot, one replayed), and its whole history.
fn everything_of(g: &Grove) -> Vec<Value> {
    let get = |args: &[&str]| -> Value {
        let mut all = vec!["state", "get", "--session", "s"];
        all.extend_from_slice(args);
        serde_json::from_str(&g.ok(&all)).expect("json")
    };
    vec![
        get(&[]),
        get(&["--at", "10"]),
        get(&["--at", "100"]),
        g.json(&["state", "history", "--session", "s", "--limit", "500"]),
    ]
}

#[test]
fn an_archived_session_is_stored_packed_and_reads_back_the_same() {
    // state-semantics.md 40.
    let g = Grove::new();
    let mut c = client(&g);
    create_session(&mut c, "s", NOTES_SCHEMA);
    // Past two snapshots (every 64 checkpoints).
    for n in 0..130 {
        let note = format!("step {n}: the parser's tests passed on the second try");
        call(
            &mut c,
            "state.update",
            json!({"session": "s", "writes": [
                {"channel": "count", "value": 1}, {"channel": "notes", "value": [note]}
            ]}),
        )
        .expect("update");
    }
    drop(c);
    let before = everything_of(&g);
    let (plain, packed) = stored_history(&g.stopped_db(), "s");
    assert_eq!(packed, 0, "an active session is stored plain");
    let g = g.with_env(&[
        ("GROVE_SESSION_GC_INTERVAL", "50ms"),
        ("GROVE_SESSION_IDLE", "100ms"),
        ("GROVE_SESSION_SUSPEND", "200ms"),
        ("GROVE_SESSION_ARCHIVE", "300ms"),
    ]);
    eventually("the session is archived", Duration::from_secs(20), || {
        lifecycle(&g, "s")["lifecycle"] == "archived"
    });
    let (archived, packed) = stored_history(&g.stopped_db(), "s");
    assert!(packed >= 2, "{packed} values packed");
    // The snapshots (the whole state) pack to a tenth or less; a checkpoint's writes
    // of a hundred bytes hardly pack, and stay plain where packing would not shrink them.
    assert!(
        archived * 3 < plain * 2,
        "archived: {archived} bytes, plain: {plain}"
    );
    eprintln!("history stored: {plain} bytes plain, {archived} archived");
    // After a restart: still archived, not in memory, and then read back whole.
    let shown = lifecycle(&g, "s");
    assert_eq!(
        (shown["lifecycle"].clone(), shown["in_memory"].clone()),
        (json!("archived"), json!(false)),
        "{shown}"
    );
    assert_eq!(everything_of(&g), before);
    // It takes writes again, stored plain beside the packed ones.
    assert_eq!(
        g.state_update("s", &["count", "1"]).trim(),
        "checkpoint 131"
    );
    assert_eq!(
        g.ok(&["state", "get", "--session", "s", "count"]).trim(),
        "131"
    );
}

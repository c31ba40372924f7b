//! Sessions as first-class (issue 17, "Lifecycle and GC"): `grove session rm` deletes a
//! session's head, checkpoints and snapshots, is refused while agents of it are live
//! unless forced, and leaves an audit row that `grove gc --log` lists.

mod support;

use grove_proto::Client;
use serde_json::{json, Value};
use std::fs;
use std::time::Duration;
use support::*;

const SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
"#;

fn create(c: &mut Client, name: &str) {
    call(
        c,
        "session.create",
        json!({"name": name, "schema_text": {"origin": "test.toml", "text": SCHEMA}}),
    )
    .expect("session.create");
}

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
    let g = Grove::new();
    let mut c = client(&g);
    create(&mut c, "old");
    create(&mut c, "other");
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
    g.ok(&["state", "update", "--session", "other", "count", "3"]);
    let out = g.ok(&["session", "rm", "old", "--reason", "done with it"]);
    assert!(out.contains("deleted session old (70 checkpoints"), "{out}");
    assert_eq!(session_names(&g), vec!["other"]);
    let out = g.run(&["state", "get", "--session", "old"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no session `old`"), "{}", out.stderr);
    // Nothing of it is left in the database, after a restart too.
    g.ok(&["daemon", "stop"]);
    let db = rusqlite::Connection::open(g.home.join("grove.db")).expect("db");
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
    create(&mut c, "old");
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
    let out = g.run(&["session", "rm", "nope"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no session `nope`"), "{}", out.stderr);
}

#[test]
fn session_rm_is_refused_while_an_agent_of_it_is_live_unless_forced() {
    let g = Grove::new();
    fs::write(g.repo.join(".grove.toml"), SCHEMA).expect("schema");
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "schema"]);
    let gate = g.dir.path().join("gate");
    let script = format!(
        r#""$GROVE_BIN" state update count 1 || exit 1
           while [ ! -e '{gate}' ]; do sleep 0.05; done
           "$GROVE_BIN" state update count 1"#,
        gate = gate.display()
    );
    let id = g.spawn(
        &["--session", "busy", "--env", &format!("GROVE_BIN={BIN}")],
        &script,
    );
    eventually("the agent wrote", Duration::from_secs(20), || {
        g.run(&["state", "get", "--session", "busy", "count"])
            .stdout
            .trim()
            == "1"
    });
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
    fs::write(g.repo.join(".grove.toml"), SCHEMA).expect("schema");
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "schema"]);
    let mut c = client(&g);
    create(&mut c, "victim");
    let result = g.dir.path().join("result");
    let script = format!(
        r#""$GROVE_BIN" state update count 1 || exit 1
           "$GROVE_BIN" session rm victim --force 2> '{r}.victim'; echo $? > '{r}.a'
           "$GROVE_BIN" session rm mine --force 2> '{r}.mine'; echo $? > '{r}.b'"#,
        r = result.display()
    );
    let id = g.spawn(
        &["--session", "mine", "--env", &format!("GROVE_BIN={BIN}")],
        &script,
    );
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
    let mut c = client(&g);
    create(&mut c, "s");
    g.ok(&["state", "update", "--session", "s", "count", "2"]);
    drop(c);
    g.ok(&["daemon", "stop"]);
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

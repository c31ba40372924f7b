//! grove's stored-state format has a version chain (the database's schema version,
//! daemon/src/db/migrations.rs): a database of any released format is migrated step by
//! step, never refused. tests/fixtures/state-formats holds a database made by each
//! format; each is opened, read and written here.
//!
//! v4.db: the format before issue 17 (made by make_v4.py from that release's
//! migrations). v8.db: made by the grove of issue 17; v9.db: daemon starts (the
//! restart counters); v10.db: idempotency keys (issue 20); v11.db: the code a
//! checkpoint records; v12.db: the renames a migration made, kept with the schema it
//! ended; v13.db (an archived session's history stored packed): made by this grove
//! (`cargo test -p grove-tests --test state_formats -- --ignored make_current_fixture`
//! writes it again).

mod support;

use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
items = { reducer = "append" }
"#;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/state-formats")
        .join(name)
}

/// A grove whose database is a copy of the fixture.
fn grove_on(fixture_name: &str) -> Grove {
    let g = Grove::new();
    fs::create_dir_all(&g.home).expect("home");
    fs::set_permissions(&g.home, fs::Permissions::from_mode(0o700)).expect("mode");
    fs::copy(fixture(fixture_name), g.home.join("grove.db")).expect("copy fixture");
    g
}

fn get(g: &Grove, args: &[&str]) -> Value {
    let mut all = vec!["state", "get", "--session", "legacy"];
    all.extend_from_slice(args);
    serde_json::from_str(&g.ok(&all)).expect("json")
}

fn opens_reads_and_writes(fixture_name: &str) {
    let g = grove_on(fixture_name);
    let mut names: Vec<String> = g.json(&["session", "list"])["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["empty", "legacy"], "{fixture_name}");
    let items: Vec<u64> = (1..=70).collect();
    assert_eq!(
        get(&g, &[]),
        json!({"count": 70, "items": items}),
        "{fixture_name}"
    );
    assert_eq!(
        get(&g, &["--at", "10", "count"]),
        json!(10),
        "{fixture_name}"
    );
    assert_eq!(
        get(&g, &["--at", "66", "count"]),
        json!(66),
        "{fixture_name}"
    );
    let history = g.json(&["state", "history", "--session", "legacy", "--limit", "3"]);
    assert_eq!(history["checkpoints"][0]["id"], 70, "{fixture_name}");
    assert_eq!(
        g.state_update("legacy", &["count", "1"]).trim(),
        "checkpoint 71"
    );
    g.state_update("empty", &["items", "[\"x\"]"]);
    g.ok(&["daemon", "restart"]);
    assert_eq!(get(&g, &["count"]), json!(71), "{fixture_name}");
    assert_eq!(
        get(&g, &["--at", "70", "count"]),
        json!(70),
        "{fixture_name}"
    );
    let empty = g.ok(&["state", "get", "--session", "empty", "items"]);
    assert_eq!(
        serde_json::from_str::<Value>(&empty).expect("json"),
        json!(["x"])
    );
    let shown = g.json(&["session", "show", "legacy"]);
    assert_eq!(shown["lifecycle"], "active", "{shown}");
}

#[test]
fn a_database_of_format_4_opens_reads_and_writes() {
    opens_reads_and_writes("v4.db");
}

#[test]
fn a_database_of_format_8_opens_reads_and_writes() {
    opens_reads_and_writes("v8.db");
}

#[test]
fn a_database_of_format_9_opens_reads_and_writes() {
    opens_reads_and_writes("v9.db");
}

#[test]
fn a_database_of_format_10_opens_reads_and_writes() {
    opens_reads_and_writes("v10.db");
}

#[test]
fn a_database_of_format_11_opens_reads_and_writes() {
    opens_reads_and_writes("v11.db");
}

#[test]
fn a_database_of_format_12_opens_reads_and_writes() {
    opens_reads_and_writes("v12.db");
}

#[test]
fn a_database_of_format_13_opens_reads_and_writes() {
    // Its session `legacy` is archived: its snapshots and writes are stored packed.
    let packed: i64 = rusqlite::Connection::open(fixture("v13.db"))
        .expect("open")
        .query_row(
            "SELECT (SELECT count(*) FROM checkpoints WHERE typeof(writes) = 'blob')
                  + (SELECT count(*) FROM snapshots WHERE typeof(state) = 'blob')",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert!(packed > 0, "the fixture holds packed rows");
    opens_reads_and_writes("v13.db");
}

#[test]
fn every_database_format_has_a_fixture() {
    // Format N is the database's schema version; each released one needs a fixture.
    let g = Grove::new();
    g.ok(&["list"]);
    let db = g.stopped_db();
    let current: i64 = db
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .expect("version");
    assert!(
        fixture(&format!("v{current}.db")).exists(),
        "no fixture for the current format {current}: run `cargo test -p grove-tests --test \
         state_formats -- --ignored make_current_fixture` and name it v{current}.db"
    );
}

/// Writes the fixture of the current format (run by hand when the format changes). Its
/// sessions are archived, so that their history is stored packed (format 13).
#[test]
#[ignore]
fn make_current_fixture() {
    let g = Grove::new().with_env(&[
        ("GROVE_SESSION_GC_INTERVAL", "50ms"),
        ("GROVE_SESSION_IDLE", "100ms"),
        ("GROVE_SESSION_SUSPEND", "200ms"),
        ("GROVE_SESSION_ARCHIVE", "300ms"),
    ]);
    let mut c = client(&g);
    for name in ["legacy", "empty"] {
        create_session_from(&mut c, name, "fixture.toml", SCHEMA);
    }
    for i in 1..=70 {
        call(
            &mut c,
            "state.update",
            json!({"session": "legacy", "writes": [
                {"channel": "items", "value": [i]}, {"channel": "count", "value": 1}
            ]}),
        )
        .expect("update");
    }
    drop(c);
    eventually("the sessions are archived", Duration::from_secs(20), || {
        g.json(&["session", "list"])["sessions"]
            .as_array()
            .is_some_and(|all| all.iter().all(|s| s["lifecycle"] == "archived"))
    });
    let db = g.stopped_db();
    let version: i64 = db
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .expect("version");
    let out = fixture(&format!("v{version}.db"));
    let _ = fs::remove_file(&out);
    db.execute("VACUUM INTO ?1", [out.to_str().expect("utf8")])
        .expect("vacuum into");
}

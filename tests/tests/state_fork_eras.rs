//! Time travel across migrations (issue 34, item 1; state-semantics.md 32 and 33): a
//! fork of a checkpoint has the schema that checkpoint was written under, reading and
//! writing exactly the channels of its era; with `--migrate` it has the newest schema
//! and the state carried through every migration recorded since.

mod support;

use serde_json::{json, Value};
use support::*;

/// Era 1: `count` and `notes`.
const V1: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
notes = { reducer = "merge" }
"#;

/// Era 2: `files` added, `notes` dropped.
const V2: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
files = { reducer = "append" }
"#;

/// Era 3: `plan` added, `files` renamed `paths`, now a set.
const V3: &str = r#"
[state]
version = 1
[state.channels]
count = { reducer = "add", default = 0 }
paths = { reducer = "union" }
plan  = { reducer = "overwrite", default = "none yet" }
"#;

/// Session `s` through three eras: checkpoint 1 in the first, 2 migrates, 3 in the
/// second, 4 migrates (renaming `files`), 5 in the third.
fn three_eras() -> Grove {
    let g = Grove::new();
    create_session_from(&mut client(&g), "s", "v1.toml", V1);
    g.state_update("s", &["count", "1", "notes", r#"{"k": 1}"#]);
    let v2 = g.write_file("v2.toml", V2);
    g.ok(&[
        "session",
        "migrate",
        "s",
        "--schema",
        v2.to_str().expect("utf8"),
        "--drop",
        "notes",
    ]);
    g.state_update("s", &["count", "1", "files", r#"["a.rs", "a.rs"]"#]);
    let v3 = g.write_file("v3.toml", V3);
    let done = g.json(&[
        "session",
        "migrate",
        "s",
        "--schema",
        v3.to_str().expect("utf8"),
        "--rename",
        "files=paths",
    ]);
    assert_eq!(done["renamed"], json!({"files": "paths"}), "{done}");
    assert_eq!(done["added"], json!(["plan"]), "{done}");
    g.state_update("s", &["plan", r#""ship it""#]);
    g
}

fn state(g: &Grove, session: &str) -> Value {
    serde_json::from_str(&g.ok(&["state", "get", "--session", session])).expect("json")
}

fn fork(g: &Grove, at: &str, name: &str, extra: &[&str]) {
    let args = [
        &[
            "state",
            "fork",
            "--from",
            "s",
            "--at",
            at,
            "--session",
            name,
        ][..],
        extra,
    ]
    .concat();
    g.ok(&args);
}

/// `session` takes a write to each of `writable` and refuses one to each of `not`.
fn writes(g: &Grove, session: &str, writable: &[(&str, &str)], not: &[(&str, &str)]) {
    for (channel, value) in writable {
        g.state_update(session, &[channel, value]);
    }
    for (channel, value) in not {
        g.refused(
            &["state", "update", "--session", session, channel, value],
            "not declared",
        );
    }
}

#[test]
fn a_fork_has_the_schema_of_its_checkpoints_era() {
    let g = three_eras();
    fork(&g, "1", "era1", &[]);
    assert_eq!(state(&g, "era1"), json!({"count": 1, "notes": {"k": 1}}));
    writes(
        &g,
        "era1",
        &[("notes", r#"{"j": 2}"#), ("count", "1")],
        &[("files", r#"["b"]"#), ("plan", r#""x""#)],
    );
    assert_eq!(
        state(&g, "era1"),
        json!({"count": 2, "notes": {"k": 1, "j": 2}})
    );

    fork(&g, "3", "era2", &[]);
    assert_eq!(
        state(&g, "era2"),
        json!({"count": 2, "files": ["a.rs", "a.rs"]})
    );
    // `files` appends in its second era.
    writes(
        &g,
        "era2",
        &[("files", r#"["a.rs"]"#)],
        &[
            ("notes", r#"{"j": 2}"#),
            ("plan", r#""x""#),
            ("paths", "[]"),
        ],
    );
    assert_eq!(state(&g, "era2")["files"], json!(["a.rs", "a.rs", "a.rs"]));

    fork(&g, "5", "era3", &[]);
    // Renamed, and a set from era 3 on: what it held stays, only new values are added.
    writes(
        &g,
        "era3",
        &[("plan", r#""again""#), ("paths", r#"["a.rs", "b.rs"]"#)],
        &[("notes", r#"{"j": 2}"#), ("files", "[]")],
    );
    assert_eq!(
        state(&g, "era3"),
        json!({"count": 2, "paths": ["a.rs", "a.rs", "b.rs"], "plan": "again"})
    );

    // The migration checkpoints themselves are of the era they begin.
    fork(&g, "2", "begins2", &[]);
    assert_eq!(state(&g, "begins2"), json!({"count": 1, "files": []}));
    // All of it holds across a restart.
    g.ok(&["daemon", "restart"]);
    writes(&g, "era1", &[("notes", "{}")], &[("files", "[]")]);
}

#[test]
fn a_fork_with_migrate_has_the_newest_schema_and_the_state_carried_forward() {
    let g = three_eras();
    fork(&g, "1", "up1", &["--migrate"]);
    // `files`, added by the first migration, renamed by the second.
    assert_eq!(
        state(&g, "up1"),
        json!({"count": 1, "paths": [], "plan": "none yet"})
    );
    writes(
        &g,
        "up1",
        &[("plan", r#""p""#), ("paths", r#"["x", "x"]"#)],
        &[("notes", r#"{"j": 2}"#), ("files", "[]")],
    );
    assert_eq!(
        state(&g, "up1")["paths"],
        json!(["x"]),
        "a set, as in era 3"
    );

    fork(&g, "3", "up2", &["--migrate"]);
    assert_eq!(
        state(&g, "up2"),
        json!({"count": 2, "paths": ["a.rs", "a.rs"], "plan": "none yet"})
    );
    let schema = &g.json(&["session", "show", "up2"])["schema"];
    assert!(schema.to_string().contains("plan"), "{schema}");
}

#[test]
fn a_value_a_later_reducer_cannot_take_refuses_the_migrating_fork_and_makes_nothing() {
    let g = Grove::new();
    let v1 =
        "[state]\nversion = 1\n[state.channels]\nx = { reducer = \"overwrite\", default = 0 }\n";
    create_session_from(&mut client(&g), "s", "v1.toml", v1);
    g.state_update("s", &["x", r#""text""#]);
    g.state_update("s", &["x", "5"]);
    // The head's 5 fits `add`; checkpoint 1's "text" does not.
    let v2 = g.write_file("v2.toml", v1.replace("overwrite", "add"));
    g.ok(&[
        "session",
        "migrate",
        "s",
        "--schema",
        v2.to_str().expect("utf8"),
    ]);
    g.refused_all(
        &[
            "state",
            "fork",
            "--from",
            "s",
            "--at",
            "1",
            "--session",
            "f",
            "--migrate",
        ],
        &["channel `x`", "without --migrate", "nothing was created"],
    );
    g.fails(&["session", "show", "f"], &["no session"]);
    fork(&g, "1", "f", &[]);
    assert_eq!(state(&g, "f"), json!({"x": "text"}));
}

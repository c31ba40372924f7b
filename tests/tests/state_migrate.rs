//! `grove session migrate` (issue 17, "Schema evolution"): channels are added with their
//! defaults, reducers change where the stored value fits, a channel goes only with
//! `--drop`; the migration is one checkpoint (source `migrate`), and the history before
//! it still reads with the old schema. A kill -9 in the middle changes nothing.

mod support;

use serde_json::{json, Value};
use std::fs;
use support::*;

const OLD: &str = r#"
[state]
version = 1
[state.channels]
items = { reducer = "append" }
count = { reducer = "add", default = 0 }
notes = { reducer = "merge" }
"#;

const NEW: &str = r#"
[state]
version = 1
[state.channels]
items = { reducer = "union" }
count = { reducer = "add", default = 0 }
plan  = { reducer = "overwrite", default = "none yet" }
"#;

fn setup() -> (Grove, std::path::PathBuf) {
    let g = Grove::new();
    create_session_from(&mut client(&g), "s", "old.toml", OLD);
    g.state_update("s", &["items", r#"["a", "b"]"#, "count", "2"]);
    g.ok(&["state", "update", "--session", "s", "notes", r#"{"k": 1}"#]);
    let file = g.write_file("new.toml", NEW);
    (g, file)
}

fn state(g: &Grove, at: Option<&str>) -> Value {
    let mut args = vec!["state", "get", "--session", "s"];
    if let Some(at) = at {
        args.extend(["--at", at]);
    }
    serde_json::from_str(&g.ok(&args)).expect("json")
}

fn head(g: &Grove) -> u64 {
    g.json(&["session", "show", "s"])["head"]
        .as_u64()
        .expect("head")
}

#[test]
fn migrate_adds_changes_and_drops_in_one_checkpoint_and_history_keeps_its_schema() {
    let (g, file) = setup();
    let file = file.to_str().expect("utf8");
    let done = g.json(&[
        "session", "migrate", "s", "--schema", file, "--drop", "notes",
    ]);
    assert_eq!(done["checkpoint"], 3);
    assert_eq!(done["added"], json!(["plan"]));
    assert_eq!(done["dropped"], json!(["notes"]));
    assert_eq!(done["changed"], json!(["items"]));
    assert_eq!(
        state(&g, None),
        json!({"items": ["a", "b"], "count": 2, "plan": "none yet"})
    );
    let history = g.json(&["state", "history", "--session", "s"]);
    assert_eq!(history["checkpoints"][0]["source"], "migrate");
    assert_eq!(
        history["checkpoints"][0]["channels"],
        json!(["items", "notes", "plan"])
    );
    // Before the migration, the state reads as it was, in the old shape.
    assert_eq!(
        state(&g, Some("2")),
        json!({"items": ["a", "b"], "count": 2, "notes": {"k": 1}})
    );
    // After it, the new reducers apply and the dropped channel is gone.
    g.ok(&[
        "state",
        "update",
        "--session",
        "s",
        "items",
        r#"["b", "c"]"#,
    ]);
    assert_eq!(state(&g, None)["items"], json!(["a", "b", "c"]));
    g.refused(
        &["state", "update", "--session", "s", "notes", r#"{"k": 2}"#],
        "not declared",
    );
    // All of it holds across a restart, past a snapshot too.
    for _ in 0..70 {
        g.ok(&["state", "update", "--session", "s", "count", "1"]);
    }
    g.ok(&["daemon", "restart"]);
    assert_eq!(state(&g, None)["count"], 72);
    assert_eq!(state(&g, Some("1"))["notes"], json!({}));
    assert_eq!(state(&g, Some("4"))["items"], json!(["a", "b", "c"]));
}

#[test]
fn a_migration_that_would_lose_or_misread_a_value_is_refused_and_changes_nothing() {
    let (g, file) = setup();
    let path = file.to_str().expect("utf8");
    let migrate = ["session", "migrate", "s", "--schema", path];
    let drop = |channel| [&migrate[..], &["--drop", channel]].concat();
    // `notes` left out without --drop.
    g.refused(&migrate, "--drop notes");
    // A --drop of a channel it does not have.
    g.refused(&drop("nope"), "has no channel `nope`");
    // Renames that do not fit the two schemas.
    let rename = |arg| [&drop("notes")[..], &["--rename", arg]].concat();
    g.refused(&rename("nope=plan"), "has no channel `nope`");
    g.refused(&rename("count=plan"), "still declares `count`");
    g.refused(&rename("notes=plan"), "also in --drop");
    g.refused(&rename("items=nope"), "still declares `items`");
    g.refused(&rename("notes"), "give OLD=NEW");
    let rename = |arg| [&migrate[..], &["--rename", arg]].concat();
    g.refused(&rename("notes=zzz"), "does not declare `zzz`");
    g.refused(&rename("notes=items"), "already has a channel `items`");
    // A reducer the stored value does not fit: a list cannot be summed.
    fs::write(
        &file,
        NEW.replace(
            r#"items = { reducer = "union" }"#,
            r#"items = { reducer = "add" }"#,
        ),
    )
    .expect("schema");
    g.refused(&drop("notes"), "channel `items` holds array");
    // A schema file without a [state] table.
    fs::write(&file, "[worktree]\n").expect("schema");
    g.refused(&migrate, "no [state] table");
    assert_eq!(head(&g), 2);
    assert_eq!(
        state(&g, None),
        json!({"items": ["a", "b"], "count": 2, "notes": {"k": 1}})
    );
}

#[test]
fn a_kill_in_the_middle_of_a_migration_leaves_the_session_as_it_was() {
    let (g, file) = setup();
    let path = file.to_str().expect("utf8");
    g.ok(&["daemon", "stop"]);
    g.crash_during(
        "mid_session_migrate",
        &[
            "session", "migrate", "s", "--schema", path, "--drop", "notes",
        ],
    );
    assert_eq!(head(&g), 2);
    assert_eq!(
        state(&g, None),
        json!({"items": ["a", "b"], "count": 2, "notes": {"k": 1}})
    );
    g.ok(&["state", "update", "--session", "s", "notes", r#"{"j": 2}"#]);
    g.ok(&[
        "session", "migrate", "s", "--schema", path, "--drop", "notes",
    ]);
    assert_eq!(head(&g), 4);
    assert_eq!(state(&g, Some("3"))["notes"], json!({"k": 1, "j": 2}));
}

#[test]
fn an_agent_cannot_migrate_its_session() {
    let g = Grove::new();
    commit_schema(&g, OLD);
    let file = g.write_file("new.toml", NEW);
    let (code, why) = agent_of_session_runs(
        &g,
        "mine",
        &format!(
            "session migrate mine --schema '{}' --drop notes",
            file.display()
        ),
    );
    assert_eq!(code, "4");
    assert!(why.contains("may not migrate sessions"), "{why}");
    assert_eq!(g.json(&["session", "show", "mine"])["head"], 1);
}

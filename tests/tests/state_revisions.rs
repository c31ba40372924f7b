//! A schema's own revisions (issue 34, item 4; state-semantics.md, 34 to 38): a schema
//! declares `revision = N` and a chain of `[[state.migrations]]`, one step per
//! revision, that renames, drops and converts values (a jq expression or a declared
//! mapping). `grove session migrate` runs every step from the session's revision to
//! the new one, all or nothing; older checkpoints are read (`state get --at
//! --migrate`) and forked (`state fork --migrate`) through the chain.
//! tests/fixtures/schema-revisions holds a database of a session at each revision,
//! made by a real grove (`cargo test -p grove-tests --test state_revisions --
//! --ignored make_revision_fixtures` writes them again).

mod support;

use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use support::*;

/// Revision 1: a price in integer cents, a status of "open" or "closed".
const V1: &str = r#"
[state]
version = 1
[state.channels]
price = { reducer = "overwrite" }
status = { reducer = "overwrite", default = "open" }
"#;

const STEP_1_2: &str = r#"
[[state.migrations]]
from = 1
to = 2
convert.price = '{amount: ., currency: "EUR"}'
"#;

const STEP_2_3: &str = r#"
[[state.migrations]]
from = 2
to = 3
rename.price = "cost"
map.status = { open = "todo", closed = "done" }
"#;

/// Revision 2: the price becomes an object.
fn v2() -> String {
    format!(
        "{}{STEP_1_2}",
        V1.replace("version = 1\n", "version = 1\nrevision = 2\n")
    )
}

/// Revision 3: `price` is `cost`, the status values are the new words, and a channel
/// `notes` is new.
fn v3() -> String {
    let channels = r#"
[state]
version = 1
revision = 3
[state.channels]
cost = { reducer = "overwrite" }
status = { reducer = "overwrite", default = "todo" }
notes = { reducer = "merge" }
"#;
    format!("{channels}{STEP_1_2}{STEP_2_3}")
}

fn get(g: &Grove, session: &str, args: &[&str]) -> Value {
    let mut all = vec!["state", "get", "--session", session];
    all.extend_from_slice(args);
    serde_json::from_str(&g.ok(&all)).expect("json")
}

fn head(g: &Grove, session: &str) -> u64 {
    g.json(&["session", "show", session])["head"]
        .as_u64()
        .expect("head")
}

fn migrate(g: &Grove, session: &str, file: &Path) -> Value {
    g.json(&[
        "session",
        "migrate",
        session,
        "--schema",
        file.to_str().expect("utf8"),
    ])
}

fn migrate_args<'a>(session: &'a str, file: &'a Path) -> Vec<&'a str> {
    let file = file.to_str().expect("utf8");
    vec!["session", "migrate", session, "--schema", file]
}

/// Session `s` at revision 1: checkpoints 1 to 3.
fn at_v1(g: &Grove, session: &str) {
    create_session_from(&mut client(g), session, "v1.toml", V1);
    g.state_update(session, &["price", "250"]);
    g.state_update(session, &["price", "300"]);
    g.state_update(session, &["status", r#""closed""#]);
}

fn fork(g: &Grove, from: &str, at: &str, new: &str, migrate: bool) {
    let mut args = vec![
        "state",
        "fork",
        "--from",
        from,
        "--at",
        at,
        "--session",
        new,
    ];
    if migrate {
        args.push("--migrate");
    }
    g.ok(&args);
}

#[test]
fn a_chain_converts_values_and_old_checkpoints_read_through_it() {
    let g = Grove::new();
    at_v1(&g, "s");
    let (v2, v3) = (g.write_file("v2.toml", v2()), g.write_file("v3.toml", v3()));
    let done = migrate(&g, "s", &v2);
    assert_eq!(done["checkpoint"], 4);
    assert_eq!(done["converted"], json!(["price"]));
    assert_eq!(
        get(&g, "s", &[]),
        json!({"price": {"amount": 300, "currency": "EUR"}, "status": "closed"})
    );
    g.state_update("s", &["price", r#"{"amount": 400, "currency": "EUR"}"#]);
    let done = migrate(&g, "s", &v3);
    assert_eq!(done["checkpoint"], 6);
    assert_eq!(done["converted"], json!(["status"]));
    assert_eq!(done["renamed"], json!({"price": "cost"}));
    assert_eq!(done["added"], json!(["notes"]));
    let newest = json!({"cost": {"amount": 400, "currency": "EUR"}, "status": "done", "notes": {}});
    assert_eq!(get(&g, "s", &[]), newest);
    assert_eq!(
        g.json(&["session", "show", "s"])["schema"]["revision"],
        3,
        "the session shows its revision"
    );
    // Checkpoints keep the revision they were written under...
    assert_eq!(
        get(&g, "s", &["--at", "2"]),
        json!({"price": 300, "status": "open"})
    );
    assert_eq!(
        get(&g, "s", &["--at", "5"]),
        json!({"price": {"amount": 400, "currency": "EUR"}, "status": "closed"})
    );
    // ...and read through the chain to the newest where asked.
    assert_eq!(
        get(&g, "s", &["--at", "2", "--migrate"]),
        json!({"cost": {"amount": 300, "currency": "EUR"}, "status": "todo", "notes": {}})
    );
    assert_eq!(
        get(&g, "s", &["--at", "1", "--migrate", "cost"]),
        json!({"amount": 250, "currency": "EUR"})
    );
    assert_eq!(get(&g, "s", &["--at", "6", "--migrate"]), newest);
    // A fork of a revision-1 checkpoint: its own schema, or carried to revision 3.
    fork(&g, "s", "2", "old", false);
    assert_eq!(get(&g, "old", &[]), json!({"price": 300, "status": "open"}));
    g.state_update("old", &["price", "310"]);
    fork(&g, "s", "2", "new", true);
    assert_eq!(
        get(&g, "new", &[]),
        json!({"cost": {"amount": 300, "currency": "EUR"}, "status": "todo", "notes": {}})
    );
    g.state_update("new", &["notes", r#"{"k": 1}"#]);
    g.refused(
        &["state", "update", "--session", "new", "price", "1"],
        "not declared",
    );
    // A session at revision 1 goes to 3 in one migration: both steps, in order.
    at_v1(&g, "t");
    let done = migrate(&g, "t", &v3);
    assert_eq!(done["checkpoint"], 4);
    assert_eq!(done["converted"], json!(["cost", "status"]));
    assert_eq!(
        get(&g, "t", &[]),
        json!({"cost": {"amount": 300, "currency": "EUR"}, "status": "done", "notes": {}})
    );
    // All of it holds across a restart.
    g.ok(&["daemon", "restart"]);
    assert_eq!(get(&g, "s", &[]), newest);
    assert_eq!(get(&g, "s", &["--at", "2", "price"]), json!(300));
    assert_eq!(
        get(&g, "s", &["--at", "3", "--migrate", "status"]),
        json!("done")
    );
}

/// The session's head, state and checkpoint count are as they were.
fn unchanged(g: &Grove, session: &str) {
    assert_eq!(head(g, session), 3);
    assert_eq!(
        get(g, session, &[]),
        json!({"price": 300, "status": "closed"})
    );
}

#[test]
fn a_conversion_that_fails_is_refused_naming_the_step_and_channel_and_changes_nothing() {
    let g = Grove::new();
    at_v1(&g, "s");
    let cases: [(&str, String, &[&str]); 4] = [
        // A jq runtime error: an integer has no `.amount`.
        (
            "jq.toml",
            v2().replace("'{amount: ., currency: \"EUR\"}'", "'.amount'"),
            &[
                "migration 1 -> 2",
                "channel `price`",
                "jq error",
                "cannot index",
            ],
        ),
        // A value the new reducer cannot take.
        (
            "reducer.toml",
            v2().replace(
                "price = { reducer = \"overwrite\" }",
                "price = { reducer = \"add\" }",
            ),
            &[
                "migration 1 -> 2 converted channel `price` to object",
                "reducer `add`",
            ],
        ),
        // More than one value.
        (
            "many.toml",
            v2().replace("'{amount: ., currency: \"EUR\"}'", "'., .'"),
            &["migration 1 -> 2", "channel `price`", "more than one value"],
        ),
        // A held value the map has no entry for.
        (
            "map.toml",
            v3().replace("closed = \"done\"", "shut = \"done\""),
            &[
                "migration 2 -> 3",
                "channel `status`",
                "\"closed\" has no entry",
            ],
        ),
    ];
    for (name, text, needles) in cases {
        let file = g.write_file(name, text);
        let mut needles = needles.to_vec();
        needles.push("nothing was changed");
        g.refused_all(&migrate_args("s", &file), &needles);
        unchanged(&g, "s");
    }
    // A fork carried through a step that fails creates nothing.
    let v2 = g.write_file("v2.toml", v2());
    migrate(&g, "s", &v2);
    g.state_update("s", &["price", r#"{"amount": 1, "currency": "EUR"}"#]);
    let bad = v3().replace("closed = \"done\"", "shut = \"done\"");
    let bad = g.write_file("bad3.toml", bad);
    g.ok(&["state", "update", "--session", "s", "status", r#""open""#]);
    migrate(&g, "s", &bad);
    g.refused_all(
        &[
            "state",
            "fork",
            "--from",
            "s",
            "--at",
            "3",
            "--session",
            "f",
            "--migrate",
        ],
        &[
            "migration 2 -> 3",
            "channel `status`",
            "nothing was created",
        ],
    );
    g.fails(&["session", "show", "f"], &["no session"]);
}

#[test]
fn a_conversion_that_does_not_end_or_grows_without_bound_is_stopped() {
    let g = Grove::new();
    at_v1(&g, "s");
    let cases = [
        ("loop.toml", "'last(range(1e18))'", "s of CPU"),
        // A string that doubles reaches the memory limit in a few hundred ms of CPU, so
        // the memory limit, not the CPU one, stops it even on a slow machine.
        (
            "huge.toml",
            "'reduce range(64) as $i (\"x\"; . + .)'",
            "MiB of memory",
        ),
    ];
    for (name, expression, needle) in cases {
        let text = v2().replace("'{amount: ., currency: \"EUR\"}'", expression);
        let file = g.write_file(name, text);
        let started = std::time::Instant::now();
        g.refused_all(
            &migrate_args("s", &file),
            &["migration 1 -> 2", needle, "nothing was changed"],
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{name}: {:?}",
            started.elapsed()
        );
        unchanged(&g, "s");
    }
    // The daemon goes on serving, and the control: a conversion that ends passes.
    let v2 = g.write_file("v2.toml", v2());
    assert_eq!(migrate(&g, "s", &v2)["converted"], json!(["price"]));
}

#[test]
fn a_chain_that_is_not_whole_is_refused_at_load() {
    let g = Grove::new();
    at_v1(&g, "s");
    let v3 = v3();
    let cases: [(&str, String, &[&str]); 5] = [
        // A step that skips a revision.
        (
            "skip.toml",
            v3.replace(STEP_1_2, "")
                .replace("from = 2\nto = 3", "from = 1\nto = 3"),
            &[
                "skip.toml:",
                "migration 1 -> 3 skips a revision",
                "from = N, to = N + 1",
            ],
        ),
        // A gap between steps.
        (
            "gap.toml",
            v3.replace("from = 2\nto = 3", "from = 3\nto = 4")
                .replace("revision = 3", "revision = 4"),
            &["migration 3 -> 4 does not follow migration 1 -> 2", "gap"],
        ),
        // A chain that does not end at the schema's revision.
        (
            "short.toml",
            v3.replace("revision = 3", "revision = 4"),
            &["end at revision 3", "revision = 4"],
        ),
        // An expression that is not jq.
        (
            "syntax.toml",
            v3.replace("{amount: ., currency: \"EUR\"}", "{amount: "),
            &["convert.price", "migration 1 -> 2", "not valid jq"],
        ),
        // grove's own format version, which is not the user's revision.
        (
            "version.toml",
            V1.replace("version = 1", "version = 2"),
            &["version 2 is newer", "revision = 2"],
        ),
    ];
    for (name, text, needles) in cases {
        let file = g.write_file(name, text);
        g.refused_all(&migrate_args("s", &file), needles);
        unchanged(&g, "s");
    }
    // The chain itself is whole, but starts after the session's revision.
    let start = v3.replace(STEP_1_2, "");
    let start = g.write_file("start.toml", start);
    g.refused_all(
        &migrate_args("s", &start),
        &[
            "declares no migration from revision 1",
            "nothing was changed",
        ],
    );
    // A migration goes forward only.
    let v3 = g.write_file("v3.toml", &v3);
    migrate(&g, "s", &v3);
    let v2 = g.write_file("v2.toml", v2());
    g.refused_all(
        &migrate_args("s", &v2),
        &[
            "revision 3 is newer than the schema's revision 2",
            "forward only",
        ],
    );
    assert_eq!(head(&g, "s"), 4);
}

// Fixtures: a session `priced` at each revision, as a real grove stored it.

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/schema-revisions")
        .join(name)
}

fn grove_on(fixture_name: &str) -> Grove {
    let g = Grove::new();
    fs::create_dir_all(&g.home).expect("home");
    fs::set_permissions(&g.home, fs::Permissions::from_mode(0o700)).expect("mode");
    fs::copy(fixture(fixture_name), g.home.join("grove.db")).expect("copy fixture");
    g
}

#[test]
fn a_database_of_each_revision_reads_and_migrates_to_the_newest() {
    let newest = json!({"cost": {"amount": 300, "currency": "EUR"}, "status": "done", "notes": {}});
    let at_2 = json!({"cost": {"amount": 300, "currency": "EUR"}, "status": "todo", "notes": {}});
    for revision in 1..=3 {
        let name = format!("rev{revision}.db");
        let g = grove_on(&name);
        let schema = g.json(&["session", "show", "priced"])["schema"].clone();
        assert_eq!(schema["revision"].as_u64().unwrap_or(1), revision, "{name}");
        // Checkpoint 2 was written at revision 1 in every one of them.
        assert_eq!(
            get(&g, "priced", &["--at", "2"]),
            json!({"price": 300, "status": "open"}),
            "{name}"
        );
        if revision < 3 {
            let v3 = g.write_file("v3.toml", v3());
            migrate(&g, "priced", &v3);
        }
        assert_eq!(get(&g, "priced", &[]), newest, "{name}");
        assert_eq!(
            get(&g, "priced", &["--at", "2", "--migrate"]),
            at_2,
            "{name}"
        );
        fork(&g, "priced", "2", "f", true);
        assert_eq!(get(&g, "f", &[]), at_2, "{name}");
        g.state_update("priced", &["notes", r#"{"read": true}"#]);
    }
}

/// Writes the fixtures (run by hand when the chain's stored form changes).
#[test]
#[ignore]
fn make_revision_fixtures() {
    let files = [("v2.toml", v2()), ("v3.toml", v3())];
    for revision in 1..=3 {
        let g = Grove::new();
        at_v1(&g, "priced");
        for (name, text) in &files[..revision - 1] {
            let file = g.write_file(name, text);
            migrate(&g, "priced", &file);
        }
        let db = g.stopped_db();
        let out = fixture(&format!("rev{revision}.db"));
        fs::create_dir_all(out.parent().expect("parent")).expect("dir");
        let _ = fs::remove_file(&out);
        db.execute("VACUUM INTO ?1", [out.to_str().expect("utf8")])
            .expect("vacuum into");
    }
}

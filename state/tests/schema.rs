//! Parsing the `[state]` schema from TOML and JSON.
#![allow(clippy::unwrap_used)]

use grove_state::{ChannelSpec, Reducer, SameKey, Schema, SchemaError, SCHEMA_VERSION};
use serde_json::json;

const DESIGN_EXAMPLE: &str = r#"
[agent]
command = "claude"

[state]
version = 1
[state.channels]
files_modified = { reducer = "append" }
tests_passed   = { reducer = "add", default = 0 }
plan           = { reducer = "overwrite" }
findings       = { reducer = "merge" }
labels         = { reducer = "union" }
"#;

fn toml_error(text: &str) -> SchemaError {
    Schema::from_toml(text, ".grove.toml").unwrap_err()
}

#[test]
fn good_schema_parses_every_channel() {
    let schema = Schema::from_toml(DESIGN_EXAMPLE, ".grove.toml")
        .unwrap()
        .unwrap();
    assert_eq!(schema.version, 1);
    assert_eq!(
        schema.channel_names(),
        [
            "files_modified",
            "findings",
            "labels",
            "plan",
            "tests_passed"
        ]
    );
    assert_eq!(
        schema.channels["tests_passed"],
        ChannelSpec {
            reducer: Reducer::Add,
            default: Some(json!(0)),
            same_key: SameKey::Replace,
        }
    );
    assert_eq!(
        schema.channels["plan"],
        ChannelSpec {
            reducer: Reducer::Overwrite,
            default: None,
            same_key: SameKey::Replace,
        }
    );
    assert_eq!(
        serde_json::Value::Object(schema.initial_state()),
        json!({"files_modified": [], "tests_passed": 0, "plan": null, "findings": {}, "labels": []})
    );
}

#[test]
fn channels_as_header_tables_and_nested_defaults_parse() {
    let text = r#"
[state]
version = 1

[state.channels.notes]
reducer = "merge"
default = { owner = "ana", tags = ["a", 1, 2.5, true] }

[state.channels.best]
reducer = "max"
"#;
    let schema = Schema::from_toml(text, "schema.toml").unwrap().unwrap();
    assert_eq!(
        schema.channels["notes"].default,
        Some(json!({"owner": "ana", "tags": ["a", 1, 2.5, true]}))
    );
    assert_eq!(schema.initial_state()["best"], json!(null));
}

#[test]
fn every_default_is_the_initial_value() {
    let text = r#"
[state]
version = 1
[state.channels]
o = { reducer = "overwrite", default = "draft" }
a = { reducer = "append", default = ["x"] }
n = { reducer = "add", default = 5 }
hi = { reducer = "max", default = 1.5 }
lo = { reducer = "min", default = -3 }
u = { reducer = "union", default = ["x", "y", "x"] }
m = { reducer = "merge", default = { k = 1 } }
"#;
    let schema = Schema::from_toml(text, "s.toml").unwrap().unwrap();
    assert_eq!(
        serde_json::Value::Object(schema.initial_state()),
        json!({"o": "draft", "a": ["x"], "n": 5, "hi": 1.5, "lo": -3, "u": ["x", "y"], "m": {"k": 1}})
    );
}

#[test]
fn missing_state_table_is_none() {
    assert_eq!(
        Schema::from_toml("[agent]\ncommand = \"x\"\n", ".grove.toml").unwrap(),
        None
    );
    assert_eq!(Schema::from_toml("", ".grove.toml").unwrap(), None);
}

#[test]
fn unknown_reducer_points_at_the_reducer_value() {
    let text = "[state]\nversion = 1\n[state.channels]\nplan = { reducer = \"overwrite\" }\ncount = { reducer = \"sum\" }\n";
    let error = toml_error(text);
    assert_eq!((error.line, error.column), (Some(5), Some(21)));
    let message = error.to_string();
    assert!(message.starts_with(".grove.toml:5:21: "), "{message}");
    assert!(message.contains("unknown reducer `sum`"), "{message}");
    assert!(message.contains("channel `count`"), "{message}");
    assert!(
        message.contains("overwrite, append, add, max, min, union, merge"),
        "{message}"
    );
}

#[test]
fn unknown_reducer_in_a_header_table_points_at_its_line() {
    let text = "[state]\nversion = 1\n\n[state.channels.count]\nreducer = \"summ\"\n";
    let error = toml_error(text);
    assert_eq!((error.line, error.column), (Some(5), Some(11)));
}

#[test]
fn bad_toml_gives_its_position() {
    let text = "[state]\nversion = 1\n[state.channels]\nplan = { reducer = \"overwrite\" \n";
    let error = toml_error(text);
    assert_eq!(error.file, ".grove.toml");
    assert_eq!(error.line, Some(4), "{error}");
    assert!(error.column.is_some(), "{error}");
    assert!(error.to_string().starts_with(".grove.toml:4:"), "{error}");
    assert!(!error.to_string().contains('\n'), "one line: {error}");
}

#[test]
fn default_of_the_wrong_type_is_refused_at_the_default() {
    let cases = [
        (
            "c = { reducer = \"add\", default = \"zero\" }",
            "expected a number, got a string",
        ),
        (
            "c = { reducer = \"append\", default = 3 }",
            "expected an array, got a number",
        ),
        (
            "c = { reducer = \"union\", default = { a = 1 } }",
            "expected an array, got an object",
        ),
        (
            "c = { reducer = \"merge\", default = [1] }",
            "expected an object, got an array",
        ),
        (
            "c = { reducer = \"max\", default = true }",
            "expected a number, got a boolean",
        ),
    ];
    for (line, expected) in cases {
        let text = format!("[state]\nversion = 1\n[state.channels]\n{line}\n");
        let error = toml_error(&text);
        let column = line.find("default = ").unwrap() + "default = ".len() + 1;
        assert_eq!(
            (error.line, error.column),
            (Some(4), Some(column)),
            "{error}"
        );
        assert!(
            error
                .reason
                .contains("default of channel `c` does not fit reducer"),
            "{error}"
        );
        assert!(error.reason.contains(expected), "{error}");
    }
}

#[test]
fn missing_or_bad_version_is_refused() {
    let missing = toml_error("[state]\n[state.channels]\nx = { reducer = \"add\" }\n");
    assert_eq!(missing.line, Some(1));
    assert!(missing.reason.contains("no `version`"), "{missing}");
    for version in ["0", "-1", "\"1\"", "1.0", "99999999999"] {
        let error = toml_error(&format!("[state]\nversion = {version}\n"));
        assert_eq!((error.line, error.column), (Some(2), Some(11)), "{error}");
        assert!(
            error.reason.contains("positive integer"),
            "{version}: {error}"
        );
    }
}

#[test]
fn newer_version_is_refused() {
    let error = toml_error(&format!("[state]\nversion = {}\n", SCHEMA_VERSION + 1));
    assert!(
        error.reason.contains("newer than this grove understands"),
        "{error}"
    );
    assert!(Schema::check_stored_version(SCHEMA_VERSION).is_ok());
    let stored = Schema::check_stored_version(SCHEMA_VERSION + 1).unwrap_err();
    assert!(
        stored
            .to_string()
            .contains("newer than this grove understands"),
        "{stored}"
    );
}

/// Behaviour 31: `same_key` is a mode of `merge` channels only, read alike from TOML and
/// JSON, and stored only when set (a schema without it keeps its form).
#[test]
fn same_key_is_read_for_merge_channels_and_refused_elsewhere() {
    let text = "[state]\nversion = 1\n[state.channels]\nclaims = { reducer = \"merge\", same_key = \"refuse\" }\nnotes = { reducer = \"merge\" }\n";
    let schema = Schema::from_toml(text, ".grove.toml").unwrap().unwrap();
    assert_eq!(schema.channels["claims"].same_key, SameKey::Refuse);
    assert_eq!(schema.channels["notes"].same_key, SameKey::Replace);
    let wire = schema.to_json();
    assert_eq!(wire["channels"]["claims"]["same_key"], "refuse");
    assert!(
        wire["channels"]["notes"].get("same_key").is_none(),
        "{wire}"
    );
    assert_eq!(Schema::from_json(&wire).unwrap(), schema);

    let error = toml_error(
        "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"add\", same_key = \"refuse\" }\n",
    );
    assert_eq!((error.line, error.column), (Some(4), Some(35)));
    assert!(
        error.reason.contains("only to reducer `merge`, not `add`"),
        "{error}"
    );
    let error = toml_error(
        "[state]\nversion = 1\n[state.channels]\nm = { reducer = \"merge\", same_key = \"keep\" }\n",
    );
    assert!(
        error
            .reason
            .contains("\"replace\", \"refuse\" or \"merge\""),
        "{error}"
    );
    let deep = "[state]\nversion = 1\n[state.channels]\nm = { reducer = \"merge\", same_key = \"merge\" }\n";
    let deep = Schema::from_toml(deep, ".grove.toml").unwrap().unwrap();
    assert_eq!(deep.channels["m"].same_key, SameKey::Merge);
    assert_eq!(Schema::from_json(&deep.to_json()).unwrap(), deep);
    let json_error = Schema::from_json(&json!({
        "version": 1, "channels": {"m": {"reducer": "merge", "same_key": 1}}
    }))
    .unwrap_err();
    assert!(
        json_error.to_string().contains("`same_key` of channel `m`"),
        "{json_error}"
    );
}

#[test]
fn unknown_key_in_a_channel_is_refused_at_the_key() {
    let error = toml_error(
        "[state]\nversion = 1\n[state.channels]\nx = { reducer = \"add\", defualt = 0 }\n",
    );
    assert_eq!((error.line, error.column), (Some(4), Some(24)));
    assert!(
        error
            .reason
            .contains("unknown key `defualt` in channel `x`"),
        "{error}"
    );
}

#[test]
fn unknown_key_in_state_is_refused() {
    let error = toml_error("[state]\nversion = 1\n[state.chanels]\nx = { reducer = \"add\" }\n");
    assert_eq!(error.line, Some(3));
    assert!(
        error.reason.contains("unknown key `chanels` in [state]"),
        "{error}"
    );
}

#[test]
fn empty_channel_name_is_refused() {
    let error =
        toml_error("[state]\nversion = 1\n[state.channels]\n\"\" = { reducer = \"add\" }\n");
    assert_eq!((error.line, error.column), (Some(4), Some(1)));
    assert!(
        error.reason.contains("channel name must not be empty"),
        "{error}"
    );
}

#[test]
fn channel_without_reducer_or_not_a_table_is_refused() {
    let no_reducer = toml_error("[state]\nversion = 1\n[state.channels]\nx = { default = 1 }\n");
    assert!(
        no_reducer.reason.contains("channel `x` has no `reducer`"),
        "{no_reducer}"
    );
    assert_eq!(no_reducer.line, Some(4));
    let not_table = toml_error("[state]\nversion = 1\n[state.channels]\nx = \"add\"\n");
    assert!(not_table.reason.contains("must be a table"), "{not_table}");
    assert_eq!(not_table.line, Some(4));
}

#[test]
fn datetime_default_is_refused() {
    let error = toml_error("[state]\nversion = 1\n[state.channels]\nx = { reducer = \"overwrite\", default = 1979-05-27 }\n");
    assert_eq!(error.line, Some(4));
    assert!(error.reason.contains("no JSON form"), "{error}");
}

#[test]
fn display_without_position_has_no_numbers() {
    let error = Schema::from_json(&json!({"channels": {}})).unwrap_err();
    assert_eq!(error.to_string(), format!("state schema: {}", error.reason));
}

#[test]
fn json_round_trips() {
    let schema = Schema::from_toml(DESIGN_EXAMPLE, ".grove.toml")
        .unwrap()
        .unwrap();
    let wire = schema.to_json();
    assert_eq!(
        wire["channels"]["tests_passed"],
        json!({"reducer": "add", "default": 0})
    );
    assert_eq!(wire["channels"]["plan"], json!({"reducer": "overwrite"}));
    assert_eq!(Schema::from_json(&wire).unwrap(), schema);
    let via_serde: Schema = serde_json::from_value(serde_json::to_value(&schema).unwrap()).unwrap();
    assert_eq!(via_serde, schema);
}

#[test]
fn json_schema_is_validated_like_toml() {
    let example = json!({"version": 1, "channels": {"x": {"reducer": "add", "default": 0}}});
    assert_eq!(
        Schema::from_json(&example).unwrap().channels["x"].reducer,
        Reducer::Add
    );
    let cases = [
        (
            json!({"version": 1, "channels": {"x": {"reducer": "sum"}}}),
            "unknown reducer `sum`",
        ),
        (
            json!({"version": 1, "channels": {"x": {"reducer": "add", "default": "0"}}}),
            "does not fit reducer `add`",
        ),
        (
            json!({"version": 1, "channels": {"x": {"reducer": "add", "extra": 1}}}),
            "unknown key `extra`",
        ),
        (
            json!({"version": 1, "channels": {"": {"reducer": "add"}}}),
            "must not be empty",
        ),
        (json!({"version": 0, "channels": {}}), "positive integer"),
        (json!({"version": "1"}), "positive integer"),
        (json!([]), "must be an object"),
    ];
    for (value, expected) in cases {
        let error = Schema::from_json(&value).unwrap_err();
        assert!(error.reason.contains(expected), "{value}: {error}");
        assert_eq!((error.line, error.column), (None, None));
    }
}

#[test]
fn json_null_default_means_none() {
    let schema = Schema::from_json(
        &json!({"version": 1, "channels": {"x": {"reducer": "add", "default": null}}}),
    )
    .unwrap();
    assert_eq!(schema.channels["x"].default, None);
    assert_eq!(schema.initial_state()["x"], json!(0));
}

const REVISED: &str = r#"
[state]
version = 1
revision = 3
[state.channels]
cost = { reducer = "overwrite" }
status = { reducer = "overwrite" }

[[state.migrations]]
from = 1
to = 2
convert.price = '{amount: ., currency: "EUR"}'

[[state.migrations]]
from = 2
to = 3
rename.price = "cost"
drop = ["notes"]
map.status = { open = "todo", closed = "done" }
"#;

#[test]
fn a_revision_and_its_chain_read_from_toml_and_round_trip_through_json() {
    let schema = Schema::from_toml(REVISED, "s.toml").unwrap().unwrap();
    assert_eq!((schema.version, schema.revision), (1, 3));
    assert_eq!(schema.migrations.len(), 2);
    assert_eq!(schema.migrations[1].rename["price"], "cost");
    assert_eq!(schema.migrations[1].drop, ["notes"]);
    assert_eq!(schema.migrations[1].map["status"]["open"], "todo");
    // The stored form reads back as the same schema.
    assert_eq!(Schema::from_json(&schema.to_json()).unwrap(), schema);
    // A schema without a revision is revision 1, and stores as it always did.
    let plain = Schema::from_toml(DESIGN_EXAMPLE, ".grove.toml")
        .unwrap()
        .unwrap();
    assert_eq!(plain.revision, 1);
    assert!(plain.migrations.is_empty());
    let stored = plain.to_json();
    assert!(stored.get("revision").is_none() && stored.get("migrations").is_none());
}

#[test]
fn a_chain_that_is_not_whole_or_not_well_formed_is_refused_with_where() {
    let cases = [
        (
            REVISED.replace("from = 2\nto = 3", "from = 2\nto = 4"),
            "skips a revision",
        ),
        (
            REVISED.replace("revision = 3", "revision = 5"),
            "end at revision 3",
        ),
        (
            REVISED.replace("revision = 3", "revision = 0"),
            "positive integer",
        ),
        (
            REVISED.replace("drop = [\"notes\"]", "drop = \"notes\""),
            "list of channel",
        ),
        (
            REVISED.replace("rename.price = \"cost\"", "rename.price = 1"),
            "channel = \"text\"",
        ),
        (REVISED.replace("from = 1\n", ""), "needs `from`"),
        (
            REVISED.replace("drop = [\"notes\"]", "drop = [\"price\"]"),
            "renames and drops",
        ),
        (
            REVISED.replace("map.status", "convert.status = '.'\nmap.status"),
            "both converts and maps",
        ),
        (
            REVISED.replace("convert.price", "shift.price"),
            "unknown key `shift`",
        ),
        (
            REVISED.replace("'{amount: .", "'{amount: .["),
            "not valid jq",
        ),
    ];
    for (text, needle) in cases {
        let error = toml_error(&text).to_string();
        assert!(error.contains(needle), "{needle}: {error}");
        assert!(error.starts_with(".grove.toml:"), "{error}");
    }
}

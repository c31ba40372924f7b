//! The numbered behaviours of `docs/state-semantics.md` that this crate
//! covers, one test (at least) each, named after the behaviour.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use grove_state::{
    apply_batch, channels_written, replay_batch, BatchError, LastChange, Reducer, Schema, State,
    Write,
};
use serde_json::{json, Value};

fn schema() -> Schema {
    let text = r#"
[state]
version = 1
[state.channels]
plan   = { reducer = "overwrite" }
files  = { reducer = "append" }
tests  = { reducer = "add" }
budget = { reducer = "add", default = 10 }
best   = { reducer = "max" }
lowest = { reducer = "min" }
labels = { reducer = "union" }
notes  = { reducer = "merge" }
"#;
    Schema::from_toml(text, ".grove.toml").unwrap().unwrap()
}

fn write(channel: &str, value: Value) -> Write {
    Write::new(channel, value)
}

fn based(channel: &str, value: Value, base: u64) -> Write {
    Write {
        channel: channel.into(),
        value,
        base: Some(base),
    }
}

/// Applies batches in order by one writer without stale checks, as the daemon would.
fn fold(schema: &Schema, batches: &[Vec<Write>]) -> State {
    batches.iter().fold(schema.initial_state(), |state, batch| {
        replay_batch(schema, &state, batch).unwrap()
    })
}

/// The state one batch leaves on the initial state, replayed as by `fold`.
fn replayed(schema: &Schema, writes: &[Write]) -> State {
    fold(schema, &[writes.to_vec()])
}

fn apply(schema: &Schema, state: &State, writes: &[Write]) -> Result<State, BatchError> {
    apply_batch(schema, state, writes, "agent-1", &HashMap::new())
}

/// Applies one batch to the initial state.
fn apply_to_initial(schema: &Schema, writes: &[Write]) -> Result<State, BatchError> {
    apply(schema, &schema.initial_state(), writes)
}

/// The initial state, its channels last changed as `last` says: batches applied to it
/// are checked for stale bases.
struct Changed {
    schema: Schema,
    last: HashMap<String, LastChange>,
}

impl Changed {
    /// `channel` last changed at `checkpoint` by `writer`, and by no one before.
    fn once(channel: &str, checkpoint: u64, writer: &str) -> Changed {
        let last = LastChange::after(None, checkpoint, writer);
        Changed::as_in(HashMap::from([(channel.to_owned(), last)]))
    }

    fn as_in(last: HashMap<String, LastChange>) -> Changed {
        Changed {
            schema: schema(),
            last,
        }
    }

    /// Applies `writes` as `writer`.
    fn apply(&self, writer: &str, writes: &[Write]) -> Result<State, BatchError> {
        let initial = self.schema.initial_state();
        apply_batch(&self.schema, &initial, writes, writer, &self.last)
    }
}

#[test]
fn b01_batch_without_write_leaves_channel_unchanged() {
    let schema = schema();
    let before = replayed(
        &schema,
        &[
            write("files", json!(["a.rs"])),
            write("plan", json!("draft")),
        ],
    );
    let after = apply(&schema, &before, &[write("tests", json!(3))]).unwrap();
    for channel in [
        "plan", "files", "budget", "best", "lowest", "labels", "notes",
    ] {
        assert_eq!(after[channel], before[channel], "{channel}");
    }
    assert_eq!(after["tests"], json!(3));
}

#[test]
fn b02_one_overwrite_replaces_the_value() {
    let schema = schema();
    let state = replayed(&schema, &[write("plan", json!({"steps": [1, 2]}))]);
    let state = apply(&schema, &state, &[write("plan", json!("ship it"))]).unwrap();
    assert_eq!(state["plan"], json!("ship it"));
}

#[test]
fn b03_two_overwrites_in_one_batch_are_refused() {
    let schema = schema();
    let before = schema.initial_state();
    let batch = [
        write("files", json!(["x"])),
        write("plan", json!("a")),
        write("plan", json!("b")),
    ];
    let error = apply(&schema, &before, &batch).unwrap_err();
    assert_eq!(
        error,
        BatchError::DoubleOverwrite {
            channel: "plan".into()
        }
    );
    assert!(error.to_string().contains("`plan`"), "{error}");
}

#[test]
fn b04_undeclared_channel_is_refused() {
    let schema = schema();
    let error = apply_to_initial(
        &schema,
        &[write("tests", json!(1)), write("nope", json!(1))],
    )
    .unwrap_err();
    assert!(matches!(&error, BatchError::UndeclaredChannel { channel, .. } if channel == "nope"));
    assert_eq!(
        error.to_string(),
        "channel `nope` is not declared in the session's schema \
         (declared: best, budget, files, labels, lowest, notes, plan, tests)"
    );
}

#[test]
fn b05_wrong_type_is_refused_naming_channel_reducer_and_type() {
    let schema = schema();
    let state = schema.initial_state();
    let cases = [
        ("tests", json!("one"), Reducer::Add, "string"),
        ("files", json!({"path": "a.rs"}), Reducer::Append, "object"),
        ("best", json!([1]), Reducer::Max, "array"),
        ("lowest", json!(true), Reducer::Min, "boolean"),
        ("labels", json!(null), Reducer::Union, "null"),
        ("notes", json!(["k"]), Reducer::Merge, "array"),
    ];
    for (channel, value, reducer, received) in cases {
        let error = apply(&schema, &state, &[write(channel, value)]).unwrap_err();
        match &error {
            BatchError::WrongType {
                channel: named,
                reducer: named_reducer,
                received: got,
                ..
            } => {
                assert_eq!(
                    (named.as_str(), *named_reducer, *got),
                    (channel, reducer, received)
                );
            }
            other => panic!("{channel}: expected WrongType, got {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains(&format!("`{channel}`")), "{message}");
        assert!(message.contains(&format!("`{reducer}`")), "{message}");
        assert!(message.contains(received), "{message}");
    }
}

#[test]
fn b06_batch_is_atomic() {
    let schema = schema();
    let before = replayed(
        &schema,
        &[write("tests", json!(2)), write("files", json!(["a"]))],
    );
    let snapshot = before.clone();
    let batch = [
        write("tests", json!(5)),
        write("files", json!(["b"])),
        write("notes", json!({"k": 1})),
        write("tests", json!("oops")),
    ];
    assert!(apply(&schema, &before, &batch).is_err());
    assert_eq!(before, snapshot, "the caller's state is untouched");
    // The caller keeps `before`, so applying the next good batch starts from it.
    let next = apply(&schema, &before, &[write("tests", json!(1))]).unwrap();
    assert_eq!(next["tests"], json!(3));
    assert_eq!(next["files"], json!(["a"]));
    assert_eq!(next["notes"], json!({}));
}

#[test]
fn b07_append_keeps_every_item_in_order() {
    let schema = schema();
    let state = fold(
        &schema,
        &[
            vec![write("files", json!(["a", "b"]))],
            vec![write("files", json!("c")), write("files", json!(["a"]))],
            vec![write("files", json!([{"path": "d"}, 4]))],
        ],
    );
    assert_eq!(
        state["files"],
        json!(["a", "b", "c", "a", {"path": "d"}, 4])
    );
}

#[test]
fn b08_append_of_empty_array_changes_nothing_but_is_a_batch() {
    let schema = schema();
    let before = replayed(&schema, &[write("files", json!(["a"]))]);
    let batch = [write("files", json!([]))];
    // Accepted (so the daemon records a checkpoint for it), yet nothing changes.
    let after = apply(&schema, &before, &batch).unwrap();
    assert_eq!(after, before);
    assert_eq!(channels_written(&batch), ["files"]);
}

#[test]
fn b09_add_sums_from_default() {
    let schema = schema();
    let batches = [
        vec![write("tests", json!(1)), write("budget", json!(1))],
        vec![
            write("tests", json!(2)),
            write("budget", json!(2)),
            write("tests", json!(3)),
            write("budget", json!(3)),
        ],
    ];
    let state = fold(&schema, &batches);
    assert_eq!(state["tests"], json!(6));
    assert_eq!(state["budget"], json!(16));
}

#[test]
fn b10_add_keeps_integers_exact_and_accepts_floats() {
    let schema = schema();
    let two_53 = 9_007_199_254_740_992_i64;
    let state = fold(
        &schema,
        &[
            vec![write("tests", json!(two_53))],
            vec![write("tests", json!(1))],
        ],
    );
    assert_eq!(state["tests"], json!(two_53 + 1));
    assert!(state["tests"].is_i64(), "stays an integer");
    let state = replayed(
        &schema,
        &[
            write("tests", json!(-3)),
            write("tests", json!(u64::MAX - 10)),
        ],
    );
    assert_eq!(state["tests"], json!(u64::MAX - 13));
    let state = replayed(
        &schema,
        &[write("tests", json!(1)), write("tests", json!(0.5))],
    );
    assert_eq!(state["tests"], json!(1.5));
}

/// Behaviour 10: a float and an integer beyond +/-2^53 are not added (the integer would
/// be rounded), in either order and within one batch; nothing is applied. Integers of
/// any size still add exactly, small ones still add to floats, and a stored batch
/// replays as it was accepted.
#[test]
fn b10_add_refuses_a_sum_that_would_round_an_integer() {
    let schema = schema();
    let past = json!(9_007_199_254_740_993_u64); // 2^53 + 1: no float holds it
    for writes in [
        vec![write("tests", json!(0.5)), write("tests", past.clone())],
        vec![write("tests", past.clone()), write("tests", json!(0.5))],
        vec![
            write("tests", json!(-9_007_199_254_740_993_i64)),
            write("tests", json!(1.5)),
        ],
    ] {
        let refused = apply_to_initial(&schema, &writes).unwrap_err();
        assert!(
            matches!(&refused, BatchError::InexactSum { channel, .. } if channel == "tests"),
            "{refused:?}"
        );
        let text = refused.to_string();
        for needle in ["`tests`", "9007199254740993", "2^53", "__overwrite__"] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }
    let state = apply_to_initial(
        &schema,
        &[
            write("tests", past.clone()),
            write("tests", json!(u64::MAX / 2)),
        ],
    )
    .unwrap();
    assert_eq!(
        state["tests"],
        json!(9_007_199_254_740_993_u64 + u64::MAX / 2)
    );
    let two_53 = json!(9_007_199_254_740_992_u64);
    let state = apply_to_initial(
        &schema,
        &[write("tests", two_53), write("tests", json!(0.5))],
    );
    assert!(state.is_ok(), "2^53 is held exactly: {state:?}");
    let stored = replayed(&schema, &[write("tests", json!(0.5)), write("tests", past)]);
    assert!(stored["tests"].is_f64(), "{stored:?}");
}

#[test]
fn b11_max_min_keep_the_extreme() {
    let schema = schema();
    let values = [json!(3), json!(-2), json!(7.5), json!(7), json!(-2.0)];
    let batches: Vec<Vec<Write>> = values
        .iter()
        .map(|value| vec![write("best", value.clone()), write("lowest", value.clone())])
        .collect();
    let state = fold(&schema, &batches);
    assert_eq!(state["best"], json!(7.5));
    assert_eq!(
        state["lowest"],
        json!(-2),
        "an equal value (-2.0) changes nothing visible"
    );
    let again = apply(
        &schema,
        &state,
        &[write("best", json!(7.5)), write("lowest", json!(-2))],
    )
    .unwrap();
    assert_eq!(again, state);
}

#[test]
fn b12_union_keeps_one_copy_in_any_order() {
    let schema = schema();
    let writes = [
        json!(["a", "b"]),
        json!(["b", {"k": 1, "j": 2}]),
        json!("a"),
        json!([{"j": 2, "k": 1}, 1]),
    ];
    let forward: Vec<Vec<Write>> = writes
        .iter()
        .map(|value| vec![write("labels", value.clone())])
        .collect();
    let backward: Vec<Vec<Write>> = forward.iter().rev().cloned().collect();
    let one = fold(&schema, &forward)["labels"].clone();
    let two = fold(&schema, &backward)["labels"].clone();
    assert_eq!(one, json!(["a", "b", {"j": 2, "k": 1}, 1]));
    let set = |value: &Value| {
        let mut items: Vec<String> = value
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        items.sort();
        items
    };
    assert_eq!(set(&one), set(&two));
}

#[test]
fn b13_merge_later_keys_win_nested_replaced_whole() {
    let schema = schema();
    let state = fold(
        &schema,
        &[
            vec![write("notes", json!({"a": 1, "nested": {"x": 1, "y": 2}}))],
            vec![
                write("notes", json!({"b": 2})),
                write("notes", json!({"a": 3, "nested": {"z": 3}})),
            ],
        ],
    );
    assert_eq!(state["notes"], json!({"a": 3, "b": 2, "nested": {"z": 3}}));
}

/// Behaviour 31: a `merge` channel with `same_key = "refuse"` takes new keys and a key
/// written again with its value (1 and 1.0 are one), refuses another value for a held
/// key (also within one batch) naming the channel, the key and both values, and leaves
/// everything as it was; `__overwrite__` still replaces the whole object, and a stored
/// batch replays as it was accepted.
#[test]
fn b31_merge_refusing_same_keys_keeps_the_first_value_of_each_key() {
    let text = "[state]\nversion = 1\n[state.channels]\nclaims = { reducer = \"merge\", same_key = \"refuse\" }\n";
    let schema = Schema::from_toml(text, ".grove.toml").unwrap().unwrap();
    let first = apply_to_initial(&schema, &[write("claims", json!({"a.rs": "agent-1"}))]).unwrap();
    let both = apply(
        &schema,
        &first,
        &[write(
            "claims",
            json!({"a.rs": "agent-1", "b.rs": "agent-2", "n": 1}),
        )],
    )
    .unwrap();
    assert_eq!(
        both["claims"],
        json!({"a.rs": "agent-1", "b.rs": "agent-2", "n": 1})
    );
    let same = apply(&schema, &both, &[write("claims", json!({"n": 1.0}))]).unwrap();
    assert_eq!(
        same["claims"]["n"].as_f64(),
        Some(1.0),
        "an equal value is taken"
    );

    for writes in [
        vec![write("claims", json!({"c.rs": "x", "a.rs": "agent-3"}))],
        vec![
            write("claims", json!({"c.rs": "x"})),
            write("claims", json!({"c.rs": "y"})),
        ],
    ] {
        let refused = apply(&schema, &both, &writes).unwrap_err();
        assert!(
            matches!(&refused, BatchError::KeyConflict { channel, .. } if channel == "claims"),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(
            text.contains("`claims`") && text.contains("__overwrite__"),
            "{text}"
        );
    }
    let refused = apply(
        &schema,
        &both,
        &[write("claims", json!({"a.rs": "agent-3"}))],
    );
    let text = refused.unwrap_err().to_string();
    for needle in ["key `a.rs`", "\"agent-1\"", "\"agent-3\""] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let cleared = apply(
        &schema,
        &both,
        &[write(
            "claims",
            json!({"__overwrite__": {"a.rs": "agent-3"}}),
        )],
    )
    .unwrap();
    assert_eq!(cleared["claims"], json!({"a.rs": "agent-3"}));
    let stored = fold(
        &schema,
        &[vec![
            write("claims", json!({"k": 1})),
            write("claims", json!({"k": 2})),
        ]],
    );
    assert_eq!(stored["claims"], json!({"k": 2}));
}

#[test]
fn b14_overwrite_marker_replaces_any_reducer_value() {
    let schema = schema();
    let full = replayed(
        &schema,
        &[
            write("files", json!(["a", "b"])),
            write("tests", json!(4)),
            write("best", json!(9)),
            write("labels", json!(["x"])),
            write("notes", json!({"k": 1})),
            write("plan", json!("p")),
        ],
    );
    let clear = |channel: &str, value: Value| write(channel, json!({"__overwrite__": value}));
    let batch = [
        clear("files", json!([])),
        clear("tests", json!(0)),
        clear("best", json!(1)),
        clear("labels", json!(["y"])),
        clear("notes", json!({"fresh": true})),
        clear("plan", json!(null)),
    ];
    let state = apply(&schema, &full, &batch).unwrap();
    assert_eq!(
        Value::Object(state.clone()),
        json!({"files": [], "tests": 0, "budget": 10, "best": 1, "lowest": null,
               "labels": ["y"], "notes": {"fresh": true}, "plan": null})
    );
    // The reducer goes on from the replaced value.
    let state = apply(
        &schema,
        &state,
        &[write("best", json!(0)), write("files", json!(["c"]))],
    )
    .unwrap();
    assert_eq!(
        (&state["best"], &state["files"]),
        (&json!(1), &json!(["c"]))
    );
}

#[test]
fn b14_two_overwrite_markers_in_one_batch_are_refused() {
    let schema = schema();
    let batch = [
        write("files", json!({"__overwrite__": []})),
        write("files", json!(["a"])),
        write("files", json!({"__overwrite__": ["b"]})),
    ];
    let error = apply_to_initial(&schema, &batch).unwrap_err();
    assert_eq!(
        error,
        BatchError::DoubleOverwrite {
            channel: "files".into()
        }
    );
}

#[test]
fn b15_overwrite_marker_on_empty_channel_stores_the_value() {
    let schema = schema();
    let batch = [
        write("best", json!({"__overwrite__": 5})),
        write("files", json!({"__overwrite__": ["only"]})),
        write("notes", json!({"__overwrite__": {"k": [1]}})),
    ];
    let state = apply_to_initial(&schema, &batch).unwrap();
    assert_eq!(
        (&state["best"], &state["files"], &state["notes"]),
        (&json!(5), &json!(["only"]), &json!({"k": [1]}))
    );
}

#[test]
fn b16_stale_overwrite_is_a_conflict() {
    let plan = Changed::once("plan", 12, "agent-2");
    let batch = [write("tests", json!(1)), based("plan", json!("mine"), 10)];
    let error = plan.apply("agent-1", &batch).unwrap_err();
    assert_eq!(
        error,
        BatchError::Conflict {
            channel: "plan".into(),
            base: 10,
            changed_at: 12,
            changed_by: "agent-2".into()
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("`plan`") && message.contains("12") && message.contains("agent-2"),
        "{message}"
    );
    // Based on the checkpoint that changed it: no conflict.
    assert!(plan
        .apply("agent-1", &[based("plan", json!("mine"), 12)])
        .is_ok());
}

#[test]
fn b16_writes_without_base_or_by_the_same_writer_are_not_checked() {
    let plan = Changed::once("plan", 12, "agent-2");
    let unbased = plan.apply("agent-1", &[write("plan", json!("a"))]).unwrap();
    assert_eq!(unbased["plan"], json!("a"));
    let own = plan
        .apply("agent-2", &[based("plan", json!("b"), 3)])
        .unwrap();
    assert_eq!(own["plan"], json!("b"));
    // Replaying a stored log never re-checks staleness.
    let (schema, state) = (&plan.schema, plan.schema.initial_state());
    assert!(replay_batch(schema, &state, &[based("plan", json!("c"), 3)]).is_ok());
}

#[test]
fn b19_one_by_one_equals_one_batch() {
    let schema = schema();
    let writes = vec![
        write("files", json!(["a"])),
        write("tests", json!(2)),
        write("budget", json!(-1.5)),
        write("best", json!(4)),
        write("lowest", json!(4)),
        write("labels", json!(["x", "y"])),
        write("notes", json!({"a": 1})),
        write("plan", json!("only one overwrite")),
        write("files", json!("b")),
        write("tests", json!(5)),
        write("best", json!(9)),
        write("lowest", json!(-9)),
        write("labels", json!(["y", "z"])),
        write("notes", json!({"a": {"n": 2}})),
        write("files", json!({"__overwrite__": ["c"]})),
        write("files", json!(["d"])),
    ];
    let one_by_one: Vec<Vec<Write>> = writes.iter().map(|write| vec![write.clone()]).collect();
    assert_eq!(fold(&schema, &one_by_one), fold(&schema, &[writes]));
}

#[test]
fn empty_batch_is_refused() {
    let schema = schema();
    let error = apply_to_initial(&schema, &[]).unwrap_err();
    assert_eq!(error, BatchError::EmptyBatch);
    assert!(error.to_string().contains("at least one write"), "{error}");
    assert_eq!(error.channel(), None);
}

#[test]
fn channels_written_are_sorted_and_deduplicated() {
    let batch = [
        write("b", json!(1)),
        write("a", json!(1)),
        write("b", json!(2)),
    ];
    assert_eq!(channels_written(&batch), ["a", "b"]);
}

#[test]
fn write_reads_from_the_wire() {
    let write: Write =
        serde_json::from_value(json!({"channel": "plan", "value": [1], "base": 12})).unwrap();
    assert_eq!(write, based("plan", json!([1]), 12));
    let unbased: Write = serde_json::from_value(json!({"channel": "plan", "value": null})).unwrap();
    assert_eq!(unbased.base, None);
    assert!(
        serde_json::from_value::<Write>(json!({"channel": "plan"})).is_err(),
        "value is required"
    );
    assert!(
        serde_json::from_value::<Write>(json!({"channel": "p", "value": 1, "bsae": 1})).is_err()
    );
}

#[test]
fn marker_with_other_keys_is_an_ordinary_value() {
    let schema = schema();
    let value = json!({"__overwrite__": 1, "other": 2});
    let state = apply_to_initial(&schema, &[write("notes", value.clone())]).unwrap();
    assert_eq!(state["notes"], value);
}

#[test]
fn channel_missing_from_the_state_starts_at_its_initial_value() {
    let schema = schema();
    let state = apply(&schema, &State::new(), &[write("budget", json!(5))]).unwrap();
    assert_eq!(Value::Object(state), json!({"budget": 15}));
}

#[test]
fn reducing_onto_a_replaced_value_of_another_type_is_refused() {
    let schema = schema();
    let state =
        apply_to_initial(&schema, &[write("tests", json!({"__overwrite__": "n/a"}))]).unwrap();
    let error = apply(&schema, &state, &[write("tests", json!(1))]).unwrap_err();
    assert_eq!(
        error,
        BatchError::StoredTypeMismatch {
            channel: "tests".into(),
            reducer: Reducer::Add,
            held: "string"
        }
    );
    assert!(error.to_string().contains("__overwrite__"), "{error}");
    // Null clears to the reducer's empty value.
    let state = apply(
        &schema,
        &state,
        &[write("tests", json!({"__overwrite__": null}))],
    )
    .unwrap();
    assert_eq!(
        apply(&schema, &state, &[write("tests", json!(2))]).unwrap()["tests"],
        json!(2)
    );
}

#[test]
fn stale_overwrite_marker_on_a_list_is_a_conflict_too() {
    let files = Changed::once("files", 5, "agent-2");
    let clear = [based("files", json!({"__overwrite__": []}), 4)];
    let error = files.apply("agent-1", &clear).unwrap_err();
    assert!(
        matches!(error, BatchError::Conflict { changed_at: 5, .. }),
        "{error:?}"
    );
    // A delta carrying a base loses nothing, so it is never a conflict.
    let append = [based("files", json!(["a"]), 4)];
    assert!(files.apply("agent-1", &append).is_ok());
}

#[test]
fn sum_out_of_range_is_refused() {
    let schema = schema();
    let batch = [write("tests", json!(u64::MAX)), write("tests", json!(1))];
    let error = apply_to_initial(&schema, &batch).unwrap_err();
    assert_eq!(
        error,
        BatchError::NumberOutOfRange {
            channel: "tests".into()
        }
    );
}

#[test]
fn b16_a_writers_own_later_change_does_not_hide_anothers() {
    // agent-2 changes `plan` at 11, then agent-1 at 12 and 13.
    let at_11 = LastChange::after(None, 11, "agent-2");
    let at_12 = LastChange::after(Some(&at_11), 12, "agent-1");
    let at_13 = LastChange::after(Some(&at_12), 13, "agent-1");
    let plan = Changed::as_in(HashMap::from([("plan".to_owned(), at_13)]));
    // agent-1 last read checkpoint 10: agent-2's change at 11 is news to it.
    let error = plan
        .apply("agent-1", &[based("plan", json!("mine"), 10)])
        .unwrap_err();
    assert_eq!(
        error,
        BatchError::Conflict {
            channel: "plan".into(),
            base: 10,
            changed_at: 11,
            changed_by: "agent-2".into()
        }
    );
    // Having read 11, it has seen agent-2's change; its own later ones do not count.
    assert!(plan
        .apply("agent-1", &[based("plan", json!("mine"), 11)])
        .is_ok());
    // agent-2, based on 11, missed agent-1's changes at 12 and 13.
    let error = plan
        .apply("agent-2", &[based("plan", json!("theirs"), 11)])
        .unwrap_err();
    assert!(matches!(error, BatchError::Conflict { changed_at: 13, .. }));
}

//! Fuzzing-strength property tests: the `.grove.toml` schema parser and the batch
//! validator take anything without panicking and fail with errors that say where.

use grove_state::{apply_batch, Schema, State, Write};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::hash_map("[a-z_]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const REDUCERS: &[&str] = &[
    "overwrite",
    "append",
    "add",
    "max",
    "min",
    "union",
    "merge",
    "average",
    "",
];

fn arb_schema_text() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(
            (
                "[a-z_ ]{0,6}",
                proptest::sample::select(REDUCERS),
                proptest::option::of(arb_json()),
            ),
            0..5,
        ),
        prop_oneof![
            Just("1".to_string()),
            Just("0".to_string()),
            Just("\"x\"".to_string()),
            Just("2".to_string())
        ],
    )
        .prop_map(|(channels, version)| {
            let mut text = format!("[state]\nversion = {version}\n[state.channels]\n");
            for (name, reducer, default) in channels {
                let default = default
                    .map(|d| format!(", default = {}", toml_value(&d)))
                    .unwrap_or_default();
                text.push_str(&format!(
                    "\"{name}\" = {{ reducer = \"{reducer}\"{default} }}\n"
                ));
            }
            text
        })
}

fn toml_value(v: &Value) -> String {
    match v {
        Value::Null => "\"\"".into(),
        Value::Object(m) => format!(
            "{{ {} }}",
            m.iter()
                .map(|(k, v)| format!("\"{k}\" = {}", toml_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

fn schema() -> Schema {
    Schema::from_json(&json!({"version": 1, "channels": {
        "o": {"reducer": "overwrite"}, "a": {"reducer": "append"}, "n": {"reducer": "add"},
        "hi": {"reducer": "max"}, "lo": {"reducer": "min"}, "u": {"reducer": "union"},
        "m": {"reducer": "merge"}
    }}))
    .expect("schema")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_text_parses_or_fails_naming_the_file(text in "\\PC{0,300}") {
        if let Err(e) = Schema::from_toml(&text, "fuzz.toml") {
            prop_assert!(e.to_string().starts_with("fuzz.toml"), "{}", e);
        }
    }

    #[test]
    fn near_valid_schemas_parse_or_fail_with_a_position(text in arb_schema_text()) {
        if let Err(e) = Schema::from_toml(&text, "fuzz.toml") {
            prop_assert!(e.to_string().starts_with("fuzz.toml"), "{}", e);
        }
    }

    #[test]
    fn any_batch_applies_or_is_refused_naming_the_channel(
        writes in proptest::collection::vec(
            (proptest::sample::select(&["o", "a", "n", "hi", "lo", "u", "m", "nope"][..]), arb_json(), proptest::option::of(0u64..5)),
            0..6),
        state_seed in proptest::collection::vec((proptest::sample::select(&["o", "a", "n", "u", "m"][..]), arb_json()), 0..3),
    ) {
        let schema = schema();
        let mut state: State = schema.initial_state();
        for (channel, value) in state_seed {
            state.insert(channel.into(), value);
        }
        let writes: Vec<Write> = writes
            .into_iter()
            .map(|(channel, value, base)| Write { channel: channel.into(), value, base })
            .collect();
        let before = state.clone();
        match apply_batch(&schema, &state, &writes, "fuzz", &HashMap::new()) {
            Ok(after) => prop_assert!(after.keys().all(|k| before.contains_key(k) || schema.channel(k).is_some())),
            Err(e) => {
                prop_assert!(writes.is_empty() || e.channel().is_some(), "{e}");
                prop_assert_eq!(&state, &before);
            }
        }
    }
}

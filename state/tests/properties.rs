//! Property tests: order independence of the commutative reducers, and
//! batching independence of every reducer (behaviour 19).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use grove_state::{replay_batch, BatchError, Reducer, Schema, State, Write};
use proptest::prelude::*;
use serde_json::{json, Value};

/// One channel per reducer, named after it.
fn schema() -> Schema {
    let channels: serde_json::Map<String, Value> = Reducer::ALL
        .iter()
        .map(|reducer| {
            (
                reducer.name().to_owned(),
                json!({"reducer": reducer.name()}),
            )
        })
        .collect();
    Schema::from_json(&json!({"version": 1, "channels": channels})).unwrap()
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        "[abc]{0,2}".prop_map(Value::from),
    ]
}

/// Small JSON values, nested a little, with repeats likely (to exercise dedupe).
fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[xyz]", inner, 0..3)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        "[abc]{0,2}".prop_map(Value::from),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from)
    ]
}

fn list_write() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(json_value(), 0..4).prop_map(Value::from),
        scalar()
    ]
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[klm]", json_value(), 0..3)
        .prop_map(|map| Value::Object(map.into_iter().collect()))
}

/// A valid delta for the reducer.
fn delta(reducer: Reducer) -> BoxedStrategy<Value> {
    match reducer {
        Reducer::Overwrite => json_value().boxed(),
        Reducer::Append | Reducer::Union => list_write().boxed(),
        Reducer::Add | Reducer::Max | Reducer::Min => number().boxed(),
        Reducer::Merge => object().boxed(),
    }
}

/// A replacement of the reducer's value type, so later deltas still apply.
fn replacement(reducer: Reducer) -> BoxedStrategy<Value> {
    match reducer {
        Reducer::Overwrite => json_value().boxed(),
        Reducer::Append | Reducer::Union => prop::collection::vec(json_value(), 0..3)
            .prop_map(Value::from)
            .boxed(),
        Reducer::Add | Reducer::Max | Reducer::Min => number().boxed(),
        Reducer::Merge => object().boxed(),
    }
}

fn any_write() -> impl Strategy<Value = Write> {
    prop::sample::select(Reducer::ALL.to_vec()).prop_flat_map(|reducer| {
        let marker = replacement(reducer).prop_map(|value| json!({"__overwrite__": value}));
        prop_oneof![4 => delta(reducer), 1 => marker]
            .prop_map(move |value| Write::new(reducer.name(), value))
    })
}

/// Deltas for the commutative reducers: integer add, max, min, union.
fn commutative_write() -> impl Strategy<Value = Write> {
    prop_oneof![
        (-1_000_000_000i64..1_000_000_000).prop_map(|n| Write::new("add", json!(n))),
        number().prop_map(|n| Write::new("max", n)),
        number().prop_map(|n| Write::new("min", n)),
        list_write().prop_map(|items| Write::new("union", items)),
    ]
}

fn one_by_one(schema: &Schema, writes: &[Write]) -> State {
    writes.iter().fold(schema.initial_state(), |state, write| {
        replay_batch(schema, &state, std::slice::from_ref(write)).unwrap()
    })
}

/// Unions compared as sets (JSON-equal items are one).
fn same_set(a: &Value, b: &Value) -> bool {
    let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
    a.len() == b.len() && a.iter().all(|item| b.contains(item))
}

fn is_set(value: &Value) -> bool {
    let items = value.as_array().unwrap();
    items
        .iter()
        .enumerate()
        .all(|(i, item)| !items[i + 1..].contains(item))
}

/// The channel replaced twice, if any: one batch must refuse it.
fn double_replacement(schema: &Schema, writes: &[Write]) -> Option<String> {
    let mut seen: HashMap<&str, ()> = HashMap::new();
    writes
        .iter()
        .find(|write| {
            let replaces = write.overwrite_value().is_some()
                || schema.channels[&write.channel].reducer == Reducer::Overwrite;
            replaces && seen.insert(&write.channel, ()).is_some()
        })
        .map(|write| write.channel.clone())
}

/// Two max/min values that are equal but differ in JSON (1 and 1.0) keep
/// whichever came first; that is "nothing visible changes", not a bug.
fn without_int_float_ties(writes: &[Write]) -> bool {
    let numbers: Vec<f64> = writes
        .iter()
        .filter(|write| write.channel == "max" || write.channel == "min")
        .filter_map(|write| write.value.as_f64())
        .collect();
    numbers
        .iter()
        .enumerate()
        .all(|(i, x)| numbers[i + 1..].iter().all(|y| x != y))
}

fn shuffled(writes: Vec<Write>) -> impl Strategy<Value = (Vec<Write>, Vec<Write>)> {
    let copy = writes.clone();
    (Just(writes), Just(copy).prop_shuffle())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn commutative_reducers_ignore_write_order(
        (writes, permuted) in prop::collection::vec(commutative_write(), 0..24).prop_flat_map(shuffled)
    ) {
        prop_assume!(without_int_float_ties(&writes));
        let schema = schema();
        let (a, b) = (one_by_one(&schema, &writes), one_by_one(&schema, &permuted));
        prop_assert_eq!(&a["add"], &b["add"]);
        prop_assert_eq!(&a["max"], &b["max"]);
        prop_assert_eq!(&a["min"], &b["min"]);
        prop_assert!(same_set(&a["union"], &b["union"]), "{} vs {}", a["union"], b["union"]);
        prop_assert!(is_set(&a["union"]), "duplicates in {}", a["union"]);
        if !permuted.is_empty() {
            let batched = replay_batch(&schema, &schema.initial_state(), &permuted).unwrap();
            prop_assert_eq!(&batched["add"], &b["add"]);
            prop_assert!(same_set(&batched["union"], &a["union"]));
        }
    }

    #[test]
    fn one_batch_at_a_time_equals_one_batch(writes in prop::collection::vec(any_write(), 1..24)) {
        let schema = schema();
        let folded = one_by_one(&schema, &writes);
        let batched = replay_batch(&schema, &schema.initial_state(), &writes);
        match double_replacement(&schema, &writes) {
            Some(channel) => prop_assert_eq!(batched, Err(BatchError::DoubleOverwrite { channel })),
            None => prop_assert_eq!(batched, Ok(folded)),
        }
    }

    #[test]
    fn any_split_into_batches_gives_the_same_state(
        writes in prop::collection::vec(any_write(), 1..24),
        cuts in prop::collection::vec(any::<bool>(), 24),
    ) {
        let schema = schema();
        let mut batches: Vec<Vec<Write>> = vec![Vec::new()];
        for (write, cut) in writes.iter().zip(&cuts) {
            let current = batches.last().unwrap();
            let with_write = [current.as_slice(), std::slice::from_ref(write)].concat();
            let must_cut = double_replacement(&schema, &with_write).is_some();
            if (*cut || must_cut) && !current.is_empty() {
                batches.push(Vec::new());
            }
            batches.last_mut().unwrap().push(write.clone());
        }
        let state = batches.iter().try_fold(schema.initial_state(), |state, batch| replay_batch(&schema, &state, batch));
        prop_assert_eq!(state, Ok(one_by_one(&schema, &writes)));
    }
}

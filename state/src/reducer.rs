//! Reducers: how one write combines with the value a channel holds.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// How writes to a channel combine with its current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reducer {
    /// Replace the value.
    Overwrite,
    /// Append the written items to an array.
    Append,
    /// Add the written number.
    Add,
    /// Keep the larger number.
    Max,
    /// Keep the smaller number.
    Min,
    /// Add the written items to an array treated as a set.
    Union,
    /// Shallow-merge the written object.
    Merge,
}

/// Why a write could not be combined; the batch adds the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduceError {
    /// The written value has the wrong type (the caller knows which it is).
    WrongType,
    /// The stored value has a type the reducer cannot combine with
    /// (possible after an `__overwrite__`, which stores any value as is).
    StoredType(&'static str),
    /// The sum is not representable as a JSON number.
    OutOfRange,
}

impl Reducer {
    /// Every reducer, in the order the documentation lists them.
    pub const ALL: [Reducer; 7] = [
        Reducer::Overwrite,
        Reducer::Append,
        Reducer::Add,
        Reducer::Max,
        Reducer::Min,
        Reducer::Union,
        Reducer::Merge,
    ];

    /// The name used in schemas and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Reducer::Overwrite => "overwrite",
            Reducer::Append => "append",
            Reducer::Add => "add",
            Reducer::Max => "max",
            Reducer::Min => "min",
            Reducer::Union => "union",
            Reducer::Merge => "merge",
        }
    }

    /// What a write to this reducer must be, for error messages.
    pub fn expected_write(self) -> &'static str {
        match self {
            Reducer::Overwrite => "any JSON value",
            Reducer::Append | Reducer::Union => "an array, or one string, number or boolean item",
            Reducer::Add | Reducer::Max | Reducer::Min => "a number",
            Reducer::Merge => "an object",
        }
    }

    /// What a declared default for this reducer must be, for error messages.
    pub fn expected_default(self) -> &'static str {
        match self {
            Reducer::Append | Reducer::Union => "an array",
            other => other.expected_write(),
        }
    }

    /// Whether `value` is a valid write. A bare object or null is refused for
    /// the list reducers: it is far more often a mistake than a wanted item,
    /// and an array of one item says it unambiguously.
    pub fn accepts_write(self, value: &Value) -> bool {
        match self {
            Reducer::Overwrite => true,
            Reducer::Append | Reducer::Union => !matches!(value, Value::Object(_) | Value::Null),
            Reducer::Add | Reducer::Max | Reducer::Min => value.is_number(),
            Reducer::Merge => value.is_object(),
        }
    }

    /// Whether `value` can be the declared default (the channel's value type).
    pub fn accepts_default(self, value: &Value) -> bool {
        match self {
            Reducer::Append | Reducer::Union => value.is_array(),
            other => other.accepts_write(value),
        }
    }

    /// The initial value of a channel declared without a default. Null for
    /// `max`/`min` means "no value yet": the first write wins.
    pub fn empty_value(self) -> Value {
        match self {
            Reducer::Overwrite | Reducer::Max | Reducer::Min => Value::Null,
            Reducer::Append | Reducer::Union => Value::Array(Vec::new()),
            Reducer::Add => Value::from(0),
            Reducer::Merge => Value::Object(Map::new()),
        }
    }

    /// Combines one write with the current value. Null as the current value
    /// counts as the reducer's empty value, so `{"__overwrite__": null}` clears
    /// any channel.
    pub(crate) fn combine(self, current: Value, write: &Value) -> Result<Value, ReduceError> {
        if !self.accepts_write(write) {
            return Err(ReduceError::WrongType);
        }
        let current = match current {
            Value::Null => self.empty_value(),
            held => held,
        };
        match self {
            Reducer::Overwrite => Ok(write.clone()),
            Reducer::Append => append(current, write),
            Reducer::Add => add(current, write),
            Reducer::Max => keep_extreme(current, write, Ordering::Greater),
            Reducer::Min => keep_extreme(current, write, Ordering::Less),
            Reducer::Union => union(current, write),
            Reducer::Merge => merge(current, write),
        }
    }
}

impl fmt::Display for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown reducer name; its message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reducer `{name}` (known reducers: {known})", name = .0, known = known_reducers())]
pub struct UnknownReducer(pub String);

impl FromStr for Reducer {
    type Err = UnknownReducer;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Reducer::ALL
            .into_iter()
            .find(|reducer| reducer.name() == name)
            .ok_or_else(|| UnknownReducer(name.to_owned()))
    }
}

/// "overwrite, append, add, max, min, union, merge".
pub fn known_reducers() -> String {
    Reducer::ALL.map(Reducer::name).join(", ")
}

/// The JSON type name of a value, as error messages report it.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// "a string", "an object", "null": reads better in messages than the bare name.
pub(crate) fn a_type(name: &str) -> String {
    match name {
        "null" => "null".to_owned(),
        "array" | "object" => format!("an {name}"),
        _ => format!("a {name}"),
    }
}

/// The items a list write adds: all of an array, or the single item.
fn items(write: &Value) -> &[Value] {
    match write {
        Value::Array(items) => items,
        single => std::slice::from_ref(single),
    }
}

fn append(current: Value, write: &Value) -> Result<Value, ReduceError> {
    let Value::Array(mut list) = current else {
        return Err(ReduceError::StoredType(json_type(&current)));
    };
    list.extend_from_slice(items(write));
    Ok(Value::Array(list))
}

fn union(current: Value, write: &Value) -> Result<Value, ReduceError> {
    let Value::Array(mut set) = current else {
        return Err(ReduceError::StoredType(json_type(&current)));
    };
    // Linear membership test: JSON equality (objects ignore key order) has
    // no cheap canonical hash, and sets shared between agents stay small.
    for item in items(write) {
        if !set.iter().any(|held| same_value(held, item)) {
            set.push(item.clone());
        }
    }
    Ok(Value::Array(set))
}

/// Removes later duplicates, keeping first-seen order (a union default is a set).
pub(crate) fn dedupe(values: &[Value]) -> Vec<Value> {
    let mut set: Vec<Value> = Vec::with_capacity(values.len());
    for value in values {
        if !set.iter().any(|held| same_value(held, value)) {
            set.push(value.clone());
        }
    }
    set
}

fn merge(current: Value, write: &Value) -> Result<Value, ReduceError> {
    let Value::Object(mut object) = current else {
        return Err(ReduceError::StoredType(json_type(&current)));
    };
    let Value::Object(keys) = write else {
        return Err(ReduceError::WrongType);
    };
    for (key, value) in keys {
        object.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(object))
}

fn add(current: Value, write: &Value) -> Result<Value, ReduceError> {
    let (Value::Number(a), Value::Number(b)) = (&current, write) else {
        return Err(ReduceError::StoredType(json_type(&current)));
    };
    add_numbers(a, b)
        .map(Value::Number)
        .ok_or(ReduceError::OutOfRange)
}

fn keep_extreme(current: Value, write: &Value, wanted: Ordering) -> Result<Value, ReduceError> {
    if current.is_null() {
        return Ok(write.clone()); // no value yet: the first write wins
    }
    let (Value::Number(held), Value::Number(new)) = (&current, write) else {
        return Err(ReduceError::StoredType(json_type(&current)));
    };
    // Only a strictly more extreme value replaces: equal values (also 1 and
    // 1.0) leave the stored value, and its type, untouched.
    if compare_numbers(new, held) == Some(wanted) {
        Ok(write.clone())
    } else {
        Ok(current)
    }
}

/// An integer as i128, so that sums and comparisons of any i64/u64 are exact.
fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Integers stay integers (i64, or u64 above i64::MAX); a float on either
/// side makes a float. None when the result is not a valid JSON number.
pub(crate) fn add_numbers(a: &Number, b: &Number) -> Option<Number> {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => integer_number(x + y),
        _ => Number::from_f64(a.as_f64()? + b.as_f64()?),
    }
}

/// Of a sum [`add_numbers`] would make as floats, the integer that would be rounded: one
/// beyond +/-2^53 (where a float stops holding every integer) added to or with a float.
/// None when both are integers (exact) or the float sum holds its integer exactly.
pub fn rounded_integer(a: &Number, b: &Number) -> Option<i128> {
    const EXACT: i128 = 1 << 53;
    match (integer(a), integer(b)) {
        (Some(_), Some(_)) | (None, None) => None,
        (Some(x), None) | (None, Some(x)) => (x.abs() > EXACT).then_some(x),
    }
}

fn integer_number(value: i128) -> Option<Number> {
    if let Ok(small) = i64::try_from(value) {
        return Some(Number::from(small));
    }
    u64::try_from(value).ok().map(Number::from)
}

/// Exact for any two JSON numbers: an integer and a float compare by value (1 equals
/// 1.0; 2^53 + 1 is above 2^53 as a float), never through a rounded f64.
pub(crate) fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        (Some(x), None) => compare_integer_float(x, b.as_f64()?),
        (None, Some(y)) => compare_integer_float(y, a.as_f64()?).map(Ordering::reverse),
        (None, None) => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn compare_integer_float(x: i128, f: f64) -> Option<Ordering> {
    const LIMIT: f64 = 1.7014118346046923e38; // 2^127: beyond every i64 and u64
    if f.is_nan() {
        return None;
    }
    if f >= LIMIT {
        return Some(Ordering::Less);
    }
    if f < -LIMIT {
        return Some(Ordering::Greater);
    }
    let floor = f.floor();
    // Exact: a float below 2^127 in magnitude with no fraction is an i128.
    match x.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Some(Ordering::Less),
        other => Some(other),
    }
}

/// JSON equality with one notion of number equality everywhere: numbers are equal when
/// their values are (1 and 1.0), as `max` and `min` compare them.
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, value)| y.get(key).is_some_and(|other| same_value(value, other)))
        }
        _ => a == b,
    }
}

/// A whole number beyond what an integer holds exactly (below -2^63 or from 2^64 on)
/// arrives as a rounded float: the first one in `value`, if any. A float of exactly
/// -2^63 counts too: the integers just below it round to it.
pub fn inexact_integer(value: &Value) -> Option<f64> {
    const TWO_64: f64 = 18446744073709551616.0;
    const MINUS_TWO_63: f64 = -9223372036854775808.0;
    match value {
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (*f >= TWO_64 || *f <= MINUS_TWO_63)),
        Value::Array(items) => items.iter().find_map(inexact_integer),
        Value::Object(map) => map.values().find_map(inexact_integer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for reducer in Reducer::ALL {
            let json = serde_json::to_value(reducer).unwrap();
            assert_eq!(json, json!(reducer.name()));
            assert_eq!(serde_json::from_value::<Reducer>(json).unwrap(), reducer);
            assert_eq!(reducer.name().parse::<Reducer>().unwrap(), reducer);
        }
    }

    #[test]
    fn unknown_reducer_lists_the_known_ones() {
        let error = "sum".parse::<Reducer>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown reducer `sum` (known reducers: overwrite, append, add, max, min, union, merge)"
        );
    }

    #[test]
    fn add_overflowing_u64_is_out_of_range() {
        let result = Reducer::Add.combine(json!(u64::MAX), &json!(1));
        assert_eq!(result, Err(ReduceError::OutOfRange));
    }

    #[test]
    fn add_crosses_from_i64_to_u64_exactly() {
        let sum = Reducer::Add.combine(json!(i64::MAX), &json!(1)).unwrap();
        assert_eq!(sum, json!(i64::MAX as u64 + 1));
        let back = Reducer::Add.combine(sum, &json!(-1)).unwrap();
        assert_eq!(back, json!(i64::MAX));
    }

    #[test]
    fn add_of_a_float_gives_a_float() {
        assert_eq!(
            Reducer::Add.combine(json!(1), &json!(0.5)).unwrap(),
            json!(1.5)
        );
        assert_eq!(
            Reducer::Add.combine(json!(1.5), &json!(1)).unwrap(),
            json!(2.5)
        );
    }

    #[test]
    fn float_overflow_is_out_of_range() {
        let result = Reducer::Add.combine(json!(f64::MAX), &json!(f64::MAX));
        assert_eq!(result, Err(ReduceError::OutOfRange));
    }

    #[test]
    fn max_compares_large_integers_exactly() {
        let big = json!(9_007_199_254_740_993_u64); // 2^53 + 1: not exact as f64
        let result = Reducer::Max
            .combine(json!(9_007_199_254_740_992_u64), &big)
            .unwrap();
        assert_eq!(result, big);
    }

    #[test]
    fn numbers_are_equal_by_value_in_every_reducer() {
        assert_eq!(
            Reducer::Union
                .combine(json!([1]), &json!([1.0, 2.0, 2]))
                .unwrap(),
            json!([1, 2.0])
        );
        assert_eq!(
            Reducer::Max.combine(json!(1), &json!(1.0)).unwrap(),
            json!(1)
        );
        assert_eq!(
            dedupe(&[json!({"a": 1}), json!({"a": 1.0})]),
            vec![json!({"a": 1})]
        );
        assert!(!same_value(&json!(1), &json!("1")));
    }

    #[test]
    fn an_integer_and_a_float_compare_exactly() {
        let big = Number::from(9_007_199_254_740_993_u64); // 2^53 + 1
        let float = Number::from_f64(9_007_199_254_740_992.0).unwrap();
        assert_eq!(compare_numbers(&big, &float), Some(Ordering::Greater));
        assert_eq!(compare_numbers(&float, &big), Some(Ordering::Less));
        let half = Number::from_f64(-0.5).unwrap();
        assert_eq!(
            compare_numbers(&Number::from(-1), &half),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare_numbers(&Number::from(0), &half),
            Some(Ordering::Greater)
        );
    }

    #[test]
    fn whole_numbers_past_the_integer_range_are_found() {
        assert_eq!(inexact_integer(&json!([1, {"k": 1e20}])), Some(1e20));
        assert_eq!(inexact_integer(&json!(-1e19)), Some(-1e19));
        assert_eq!(inexact_integer(&json!(u64::MAX)), None);
        assert_eq!(inexact_integer(&json!(i64::MIN)), None);
        assert_eq!(inexact_integer(&json!(1.5e30)), Some(1.5e30));
        assert_eq!(inexact_integer(&json!(0.5)), None);
    }

    #[test]
    fn null_current_is_the_empty_value() {
        assert_eq!(
            Reducer::Append.combine(Value::Null, &json!(["a"])).unwrap(),
            json!(["a"])
        );
        assert_eq!(
            Reducer::Add.combine(Value::Null, &json!(2)).unwrap(),
            json!(2)
        );
        assert_eq!(
            Reducer::Merge
                .combine(Value::Null, &json!({"k": 1}))
                .unwrap(),
            json!({"k": 1})
        );
        assert_eq!(
            Reducer::Min.combine(Value::Null, &json!(3)).unwrap(),
            json!(3)
        );
    }

    #[test]
    fn stored_value_of_the_wrong_type_is_reported() {
        let result = Reducer::Add.combine(json!("text"), &json!(1));
        assert_eq!(result, Err(ReduceError::StoredType("string")));
    }

    #[test]
    fn list_reducers_take_one_scalar_item_but_not_a_bare_object_or_null() {
        assert_eq!(
            Reducer::Append.combine(json!([1]), &json!("x")).unwrap(),
            json!([1, "x"])
        );
        assert_eq!(
            Reducer::Union.combine(json!([1]), &json!(1)).unwrap(),
            json!([1])
        );
        assert_eq!(
            Reducer::Append.combine(json!([]), &json!({"a": 1})),
            Err(ReduceError::WrongType)
        );
        assert_eq!(
            Reducer::Union.combine(json!([]), &Value::Null),
            Err(ReduceError::WrongType)
        );
    }
}

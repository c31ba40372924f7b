//! Each tool's arguments are written three times: its input schema (tools.rs), the type
//! that reads them (args.rs, or the protocol's params type itself) and the params type
//! of the protocol method the tool calls (grove_proto::methods). These tests keep the
//! schema in step with both: a field added to one and not the others fails here, by
//! name. The schemas are hand-written for strict clients (see tools.rs), so they are
//! checked rather than generated.

use super::{args, tools};
use grove_proto::methods::{self as m, Method};
use grove_proto::types::Limits;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// What the tests need of a type that reads arguments: its field names and whether it
/// takes a given object.
struct Shape {
    name: &'static str,
    fields: fn() -> &'static [&'static str],
    takes: fn(Value) -> Result<(), String>,
}

fn shape<T: DeserializeOwned>() -> Shape {
    Shape {
        name: std::any::type_name::<T>(),
        fields: fields::<T>,
        takes: |value| {
            serde_json::from_value::<T>(value)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    }
}

/// The field names a struct's `Deserialize` asks for: serde hands them to
/// `deserialize_struct`, where this deserializer keeps them and stops.
fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut catch = Catch(None);
    let _ = T::deserialize(&mut catch);
    catch.0.expect("a struct with named fields")
}

struct Catch(Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for &mut Catch {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = Some(fields);
        Err(de::Error::custom("fields caught"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A tool and what its schema must agree with.
struct Pairing {
    tool: &'static str,
    /// The type its arguments are read into.
    args: Shape,
    /// The params type of the protocol method it calls, when it calls one.
    params: Option<Shape>,
    /// Its arguments that are not sent as the params field of that name: the server
    /// turns them into other fields (`timeout_seconds` into `timeout_ms`) or uses them
    /// itself (`agent`, a preset).
    translated: &'static [&'static str],
    /// Params fields it does not take: the server fills them (`caller_env`) or the
    /// tool does not offer them (paging, `token`, which only agents use).
    left_out: &'static [&'static str],
    /// Params fields the protocol requires and the tool does not: the server fills them
    /// when they are left out (`repo`: the directory `grove mcp` runs in).
    defaulted: &'static [&'static str],
}

fn pairing(tool: &'static str, args: Shape, params: Option<Shape>) -> Pairing {
    Pairing {
        tool,
        args,
        params,
        translated: &[],
        left_out: &[],
        defaulted: &[],
    }
}

/// A tool whose arguments are method `M`'s params as they are (`tools::forward`).
fn forwarded<M: Method>(tool: &'static str) -> Pairing {
    pairing(tool, shape::<M::Params>(), Some(shape::<M::Params>()))
}

fn pairings() -> Vec<Pairing> {
    vec![
        Pairing {
            translated: &[
                "env",
                "schema",
                "schema_file",
                "timeout_seconds",
                "max_files",
                "max_procs",
                "memory_bytes",
                "cpu_seconds",
                "agent",
                "prompt",
                "headless",
            ],
            left_out: &[
                "caller_env",
                "timeout_ms",
                "limits",
                "tty_size",
                "stdin_b64",
                // The preset's (`agent`): a caller naming files of $HOME to copy into a
                // jail is what a preset is trusted for, not a tool argument.
                "jail_home",
                // Also the preset's: which files of a worktree are its CLI's own.
                "cli_files",
            ],
            defaulted: &["argv", "repo"],
            ..pairing(
                "spawn_agent",
                shape::<args::Spawn>(),
                Some(shape::<<m::Spawn as Method>::Params>()),
            )
        },
        Pairing {
            left_out: &["data"],
            ..pairing(
                "send_input",
                shape::<args::SendInput>(),
                Some(shape::<<m::Send as Method>::Params>()),
            )
        },
        forwarded::<m::Screen>("read_screen"),
        Pairing {
            left_out: &["after", "limit"],
            ..pairing(
                "list_agents",
                shape::<args::List>(),
                Some(shape::<<m::List as Method>::Params>()),
            )
        },
        forwarded::<m::Get>("agent_status"),
        Pairing {
            translated: &["timeout_s"],
            left_out: &["timeout_ms"],
            ..pairing(
                "wait_agents",
                shape::<args::Wait>(),
                Some(shape::<<m::Wait as Method>::Params>()),
            )
        },
        pairing(
            "agent_logs",
            shape::<args::Logs>(),
            Some(shape::<<m::Logs as Method>::Params>()),
        ),
        forwarded::<m::Diff>("agent_diff"),
        // These three run `grove review`, `grove overlaps` and `grove merge`, which are
        // more than one call of the protocol.
        pairing("review_agents", shape::<args::Review>(), None),
        pairing("overlaps", shape::<args::Overlaps>(), None),
        pairing("merge_agent", shape::<args::Merge>(), None),
        // `grove discard --yes ID`: one agent.discard.
        forwarded::<m::Discard>("discard_agent"),
        Pairing {
            left_out: &["token"],
            ..pairing(
                "report_agent",
                shape::<args::Report>(),
                Some(shape::<<m::Report as Method>::Params>()),
            )
        },
        Pairing {
            left_out: &["token"],
            ..pairing(
                "answer_agent",
                shape::<args::Report>(),
                Some(shape::<<m::Answer as Method>::Params>()),
            )
        },
        forwarded::<m::Kill>("kill_agent"),
        Pairing {
            left_out: &["after", "limit"],
            ..pairing(
                "session_list",
                shape::<m::Empty>(),
                Some(shape::<<m::SessionList as Method>::Params>()),
            )
        },
        forwarded::<m::SessionShow>("session_show"),
        Pairing {
            left_out: &["token", "offset"],
            ..pairing(
                "state_get",
                shape::<args::StateGet>(),
                Some(shape::<<m::StateGet as Method>::Params>()),
            )
        },
        Pairing {
            // Sent as the `base` of each write.
            translated: &["base"],
            left_out: &["token"],
            ..pairing(
                "state_update",
                shape::<args::StateUpdate>(),
                Some(shape::<<m::StateUpdate as Method>::Params>()),
            )
        },
        Pairing {
            left_out: &["token", "before"],
            ..pairing(
                "state_history",
                shape::<args::StateHistory>(),
                Some(shape::<<m::StateHistory as Method>::Params>()),
            )
        },
        Pairing {
            left_out: &["token"],
            ..pairing(
                "state_fork",
                shape::<args::StateFork>(),
                Some(shape::<<m::StateFork as Method>::Params>()),
            )
        },
    ]
}

/// A value of the JSON type `schema` gives (its first `enum` value if it has one).
fn sample(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].get(0) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("string") => json!("x"),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        Some("array") => json!([sample(&schema["items"])]),
        Some("object") => object_sample(schema),
        _ => Value::Null,
    }
}

fn object_sample(schema: &Value) -> Value {
    if let Some(properties) = schema["properties"].as_object() {
        let all = properties.iter().map(|(k, v)| (k.clone(), sample(v)));
        return Value::Object(all.collect());
    }
    match &schema["additionalProperties"] {
        Value::Object(_) => json!({ "k": sample(&schema["additionalProperties"]) }),
        _ => json!({}),
    }
}

/// A value of another JSON type than `schema` gives; `None` when it takes any.
fn wrong_sample(schema: &Value) -> Option<Value> {
    match schema["type"].as_str()? {
        "string" => Some(json!(1)),
        _ => Some(json!("x")),
    }
}

struct Schema {
    properties: Map<String, Value>,
    required: BTreeSet<String>,
}

fn input_schema(tool: &str) -> Schema {
    let found = tools::all().into_iter().find(|t| t.name == tool);
    let schema = found
        .unwrap_or_else(|| panic!("no tool {tool}"))
        .input_schema;
    let schema = Value::Object((*schema).clone());
    let names = schema["required"].as_array().cloned().unwrap_or_default();
    Schema {
        properties: schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
        required: names
            .iter()
            .filter_map(|n| n.as_str().map(String::from))
            .collect(),
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The schema's properties `only` (all when `None`), each with its sample.
fn arguments(schema: &Schema, only: impl Fn(&str) -> bool) -> Map<String, Value> {
    let chosen = schema.properties.iter().filter(|(k, _)| only(k));
    chosen.map(|(k, v)| (k.clone(), sample(v))).collect()
}

/// Every property is a field of `shape` and the reverse; `shape` takes a value of
/// each property's type and refuses one of another; exactly the required ones are
/// required.
fn check_against_args(tool: &str, schema: &Schema, shape: &Shape) -> Vec<String> {
    let mut wrong = Vec::new();
    let fields = names((shape.fields)());
    let properties: BTreeSet<String> = schema.properties.keys().cloned().collect();
    for missing in fields.difference(&properties) {
        wrong.push(format!(
            "{tool}: {} has `{missing}`, the schema not",
            shape.name
        ));
    }
    for extra in properties.difference(&fields) {
        wrong.push(format!(
            "{tool}: the schema has `{extra}`, {} not",
            shape.name
        ));
    }
    wrong.extend(check_types(tool, schema, shape, |_| true));
    let required = arguments(schema, |k| schema.required.contains(k));
    if let Err(e) = (shape.takes)(Value::Object(required.clone())) {
        wrong.push(format!(
            "{tool}: {} requires more than the schema: {e}",
            shape.name
        ));
    }
    for name in &schema.required {
        let mut without = required.clone();
        without.remove(name);
        if (shape.takes)(Value::Object(without)).is_ok() {
            wrong.push(format!("{tool}: `{name}` is required by the schema only"));
        }
    }
    wrong
}

/// `shape` takes the samples of the properties `shared` picks and, property by
/// property, refuses a value of another type (and takes every `enum` value).
fn check_types(
    tool: &str,
    schema: &Schema,
    shape: &Shape,
    shared: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let all = arguments(schema, &shared);
    if let Err(e) = (shape.takes)(Value::Object(all.clone())) {
        wrong.push(format!(
            "{tool}: {} refuses the schema's types: {e}",
            shape.name
        ));
        return wrong;
    }
    for (name, property) in schema.properties.iter().filter(|(k, _)| shared(k)) {
        let with = |value: Value| {
            let mut changed = all.clone();
            changed.insert(name.clone(), value);
            (shape.takes)(Value::Object(changed))
        };
        if let Some(other) = wrong_sample(property) {
            if with(other.clone()).is_ok() {
                wrong.push(format!(
                    "{tool}: {} takes {other} for `{name}`, not only a {}",
                    shape.name, property["type"]
                ));
            }
        }
        for value in property["enum"].as_array().into_iter().flatten() {
            if let Err(e) = with(value.clone()) {
                wrong.push(format!("{tool}: `{name}` = {value} is refused: {e}"));
            }
        }
    }
    wrong
}

/// Every params field is a property or left out on purpose; every property not
/// translated is a params field of the same type; what the params require, the schema
/// requires too, or the server fills.
fn check_against_params(pairing: &Pairing, schema: &Schema, params: &Shape) -> Vec<String> {
    let tool = pairing.tool;
    let mut wrong = Vec::new();
    let fields = names((params.fields)());
    let left_out = names(pairing.left_out);
    let translated = names(pairing.translated);
    for field in &fields {
        if !schema.properties.contains_key(field) && !left_out.contains(field) {
            wrong.push(format!(
                "{tool}: `{field}` of {} is neither in the schema nor left out on purpose",
                params.name
            ));
        }
    }
    for field in left_out.iter().filter(|f| !fields.contains(*f)) {
        wrong.push(format!(
            "{tool}: left out `{field}` is no field of {}",
            params.name
        ));
    }
    for name in translated
        .iter()
        .filter(|t| !schema.properties.contains_key(*t))
    {
        wrong.push(format!("{tool}: translated `{name}` is not in the schema"));
    }
    for name in schema.properties.keys() {
        if !fields.contains(name) && !translated.contains(name) {
            wrong.push(format!(
                "{tool}: `{name}` is not a field of {} and not translated",
                params.name
            ));
        }
    }
    let shared = |k: &str| fields.contains(k) && !translated.contains(k);
    wrong.extend(check_types(tool, schema, params, shared));
    let sent = arguments(schema, shared);
    for name in sent.keys() {
        let mut without = sent.clone();
        without.remove(name);
        let required = (params.takes)(Value::Object(without)).is_err();
        let covered = schema.required.contains(name) || pairing.defaulted.contains(&&**name);
        if required && !covered {
            wrong.push(format!(
                "{tool}: {} requires `{name}`, which the schema does not",
                params.name
            ));
        }
    }
    wrong
}

#[test]
fn every_tool_is_paired_with_what_reads_its_arguments() {
    let paired: Vec<&str> = pairings().iter().map(|p| p.tool).collect();
    assert_eq!(paired, tools::names(), "pair each new tool below");
}

#[test]
fn each_tools_schema_agrees_with_its_arguments_and_the_protocols_params() {
    let mut wrong = Vec::new();
    for pairing in pairings() {
        let schema = input_schema(pairing.tool);
        wrong.extend(check_against_args(pairing.tool, &schema, &pairing.args));
        if let Some(params) = &pairing.params {
            wrong.extend(check_against_params(&pairing, &schema, params));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// spawn_agent takes the limits one by one: each is a field of `Limits`, and each
/// field of `Limits` is a tool argument.
#[test]
fn spawn_agent_takes_every_limit() {
    let schema = input_schema("spawn_agent");
    for field in fields::<Limits>() {
        assert!(schema.properties.contains_key(*field), "{field}");
    }
}

/// A check that cannot fail proves nothing: a params field the schema lacks, a type
/// that differs and a requirement it does not state are each found.
#[test]
fn the_checks_find_drift() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Drifted {
        id: u64,
        text: String,
        extra: String,
    }
    let drifted = Pairing {
        left_out: &["token"],
        ..pairing(
            "report_agent",
            shape::<args::Report>(),
            Some(shape::<Drifted>()),
        )
    };
    let schema = input_schema("report_agent");
    let wrong = check_against_params(&drifted, &schema, drifted.params.as_ref().expect("params"));
    let all = wrong.join("\n");
    assert!(all.contains("`extra`"), "{all}");
    assert!(all.contains("left out `token`"), "{all}");
    assert!(all.contains("refuses the schema's types"), "{all}");
}

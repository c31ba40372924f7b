//! A schema's own revisions and the chain of migrations between them
//! (state-semantics.md, 34 to 38). Each step goes from one revision to the next and
//! says what it does to a state: channels renamed, dropped, and values converted by a
//! jq expression (jaq) or a declared mapping. The daemon runs the chain on the head
//! when a session is migrated, and on an older checkpoint's state when one is read or
//! forked through it; expressions run in a child process with limits (the daemon's
//! `sessions::convert`), so that this crate stays pure.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::reducer::{a_type, json_type};
use crate::State;

/// The argument that makes `grove` a converter (stdin: [`ConvertInput`], stdout:
/// [`ConvertOutput`]), run by the daemon with limits on its time and memory.
pub const CONVERT_ARG: &str = "__state-convert";

/// The longest expression a step may hold: a conversion is a line, not a program.
const MAX_EXPRESSION: usize = 4096;

const STEP_KEYS: [&str; 6] = ["from", "to", "rename", "drop", "convert", "map"];

/// One step of the chain: from revision `from` to `from + 1`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Migration {
    pub from: u32,
    pub to: u32,
    /// Old channel name to new.
    pub rename: BTreeMap<String, String>,
    pub drop: Vec<String>,
    /// Channel (its name after `rename`) to a jq expression of its value.
    pub convert: BTreeMap<String, String>,
    /// Channel to a table of string values: each held value becomes its entry.
    pub map: BTreeMap<String, Map<String, Value>>,
}

impl Migration {
    /// The step's name in messages.
    pub fn name(&self) -> String {
        format!("migration {} -> {}", self.from, self.to)
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut step = Map::new();
        step.insert("from".into(), Value::from(self.from));
        step.insert("to".into(), Value::from(self.to));
        if !self.rename.is_empty() {
            let rename = self
                .rename
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()));
            step.insert("rename".into(), Value::Object(rename.collect()));
        }
        if !self.drop.is_empty() {
            step.insert("drop".into(), Value::from(self.drop.clone()));
        }
        if !self.convert.is_empty() {
            let convert = self
                .convert
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()));
            step.insert("convert".into(), Value::Object(convert.collect()));
        }
        if !self.map.is_empty() {
            let map = self.map.iter();
            let map = map.map(|(k, v)| (k.clone(), Value::Object(v.clone())));
            step.insert("map".into(), Value::Object(map.collect()));
        }
        Value::Object(step)
    }

    /// Reads one step of `migrations` (the `index`th) from its JSON form.
    pub(crate) fn from_json(index: usize, value: &Value) -> Result<Migration, String> {
        let place = format!("migrations[{index}]");
        let Value::Object(step) = value else {
            return Err(format!(
                "{place} must be a table like {{ from = 1, to = 2 }}, got {}",
                a_type(json_type(value))
            ));
        };
        if let Some(key) = step.keys().find(|key| !STEP_KEYS.contains(&key.as_str())) {
            return Err(format!(
                "unknown key `{key}` in {place} (known keys: {})",
                STEP_KEYS.join(", ")
            ));
        }
        let revision = |key: &str| match step.get(key).and_then(Value::as_u64) {
            Some(n) if n > 0 && n <= u64::from(u32::MAX) => Ok(n as u32),
            _ => Err(format!(
                "{place} needs `{key}`, a revision (a positive integer)"
            )),
        };
        let mut migration = Migration {
            from: revision("from")?,
            to: revision("to")?,
            ..Migration::default()
        };
        let place = migration.name();
        migration.rename = strings(step.get("rename"), &place, "rename")?;
        migration.convert = strings(step.get("convert"), &place, "convert")?;
        migration.drop = match step.get("drop") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("`drop` of {place} must be a list of channel names"))?,
            Some(_) => return Err(format!("`drop` of {place} must be a list of channel names")),
        };
        migration.map = match step.get("map") {
            None => BTreeMap::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(channel, table)| match table {
                    Value::Object(table) => Ok((channel.clone(), table.clone())),
                    _ => Err(format!(
                        "`map.{channel}` of {place} must be a table of old value = new value"
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("`map` of {place} must be a table of channels")),
        };
        migration.check()?;
        Ok(migration)
    }

    /// What one step cannot say: a channel both converted and mapped, an expression
    /// that is not jq.
    fn check(&self) -> Result<(), String> {
        let place = self.name();
        if let Some(channel) = self.map.keys().find(|c| self.convert.contains_key(*c)) {
            return Err(format!(
                "{place} both converts and maps channel `{channel}`; give one of them"
            ));
        }
        if let Some(channel) = self.drop.iter().find(|c| self.rename.contains_key(*c)) {
            return Err(format!(
                "{place} both renames and drops channel `{channel}`"
            ));
        }
        for (channel, code) in &self.convert {
            check_expression(code)
                .map_err(|error| format!("`convert.{channel}` of {place}: {error}"))?;
        }
        Ok(())
    }

    /// Whether running this step needs the jq interpreter (and so its limits).
    pub fn converts(&self) -> bool {
        !self.convert.is_empty()
    }
}

fn strings(
    value: Option<&Value>,
    place: &str,
    key: &str,
) -> Result<BTreeMap<String, String>, String> {
    let wrong = || format!("`{key}` of {place} must be a table of channel = \"text\"");
    match value {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(table)) => table
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(wrong)?.to_owned())))
            .collect(),
        Some(_) => Err(wrong()),
    }
}

/// The chain declared by a schema of revision `revision` is whole: steps in order,
/// each from one revision to the next, the last ending at `revision`.
pub(crate) fn check_chain(steps: &[Migration], revision: u32) -> Result<(), String> {
    for (index, step) in steps.iter().enumerate() {
        if step.to != step.from.saturating_add(1) {
            return Err(format!(
                "{} skips a revision: each step goes from one revision to the next \
                 (from = N, to = N + 1); declare one step for each",
                step.name()
            ));
        }
        if let Some(before) = index.checked_sub(1).map(|i| &steps[i]) {
            if step.from != before.to {
                return Err(format!(
                    "{} does not follow {}: the chain has a gap or is out of order; \
                     list the steps from the oldest revision up",
                    step.name(),
                    before.name()
                ));
            }
        }
    }
    match steps.last() {
        Some(last) if last.to != revision => Err(format!(
            "the migrations end at revision {}, but the schema is `revision = {revision}`",
            last.to
        )),
        _ => Ok(()),
    }
}

/// The steps of `steps` that take revision `from` to `to`, or why they cannot.
pub fn steps_between(steps: &[Migration], from: u32, to: u32) -> Result<&[Migration], String> {
    if from == to {
        return Ok(&[]);
    }
    if from > to {
        return Err(format!(
            "revision {from} is newer than the schema's revision {to}; a migration goes \
             forward only"
        ));
    }
    match steps.iter().position(|step| step.from == from) {
        Some(start) => Ok(&steps[start..]),
        None => Err(format!(
            "the schema (revision {to}) declares no migration from revision {from}; add \
             [[state.migrations]] steps from = {from} up to to = {to}"
        )),
    }
}

/// A chain step that could not be applied: which step, which channel, why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepError {
    pub step: String,
    pub channel: String,
    pub reason: String,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, channel `{}`: {}",
            self.step, self.channel, self.reason
        )
    }
}

/// A state carried through steps: the channels each step converted or mapped, by
/// their final names, with the step that last did (to name it when the new reducer
/// cannot take the value).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Carried {
    pub state: State,
    pub converted: BTreeMap<String, String>,
}

/// `state` taken through `steps` in order: each step's renames, then its drops, then
/// its conversions and mappings of the channels as it names them.
pub fn carry(steps: &[Migration], mut state: State) -> Result<Carried, StepError> {
    let mut converted = BTreeMap::new();
    for step in steps {
        let fail = |channel: &str, reason: String| StepError {
            step: step.name(),
            channel: channel.to_owned(),
            reason,
        };
        for (from, to) in &step.rename {
            let value = state
                .remove(from)
                .ok_or_else(|| fail(from, "renamed, but the state has no such channel".into()))?;
            state.insert(to.clone(), value);
            if let Some(by) = converted.remove(from) {
                converted.insert(to.clone(), by);
            }
        }
        for channel in &step.drop {
            state.remove(channel);
            converted.remove(channel);
        }
        for (channel, code) in &step.convert {
            let value = held(&state, channel).map_err(|r| fail(channel, r))?;
            let value = jq::run(code, value).map_err(|r| fail(channel, r))?;
            state.insert(channel.clone(), value);
            converted.insert(channel.clone(), step.name());
        }
        for (channel, table) in &step.map {
            let value = held(&state, channel).map_err(|r| fail(channel, r))?;
            let value = mapped(table, value).map_err(|r| fail(channel, r))?;
            state.insert(channel.clone(), value);
            converted.insert(channel.clone(), step.name());
        }
    }
    Ok(Carried { state, converted })
}

fn held<'s>(state: &'s State, channel: &str) -> Result<&'s Value, String> {
    state.get(channel).ok_or_else(|| {
        "converted, but the state has no such channel at that revision (after the step's \
         renames)"
            .to_owned()
    })
}

/// A mapped value is a string with an entry, or a list of such (each item mapped);
/// null (a channel not yet written) stays null.
fn mapped(table: &Map<String, Value>, value: &Value) -> Result<Value, String> {
    match value {
        Value::Null => Ok(Value::Null),
        Value::String(text) => table.get(text).cloned().ok_or_else(|| {
            let keys: Vec<&str> = table.keys().map(String::as_str).collect();
            format!(
                "the value {value} has no entry in the step's map (it maps: {})",
                keys.join(", ")
            )
        }),
        Value::Array(items) => items.iter().map(|item| mapped(table, item)).collect(),
        other => Err(format!(
            "a map converts strings (or lists of them), and the channel holds {}",
            a_type(json_type(other))
        )),
    }
}

/// What the converter reads: the steps (as a schema's `migrations`) and the state.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ConvertInput {
    pub migrations: Vec<Value>,
    pub state: State,
}

/// What the converter writes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum ConvertOutput {
    #[serde(rename = "carried")]
    Carried(Carried),
    #[serde(rename = "error")]
    Error(StepError),
}

impl ConvertInput {
    pub fn new(steps: &[Migration], state: State) -> ConvertInput {
        ConvertInput {
            migrations: steps.iter().map(Migration::to_json).collect(),
            state,
        }
    }

    /// Runs the chain, as the converter process does.
    pub fn run(self) -> ConvertOutput {
        let fail = |reason| {
            ConvertOutput::Error(StepError {
                step: "the migrations".into(),
                channel: String::new(),
                reason,
            })
        };
        match deep(move || Ok(self.run_here())) {
            Ok(output) => output,
            Err(reason) => fail(reason),
        }
    }

    fn run_here(&self) -> ConvertOutput {
        let steps: Result<Vec<Migration>, String> = self
            .migrations
            .iter()
            .enumerate()
            .map(|(index, step)| Migration::from_json(index, step))
            .collect();
        let steps = match steps {
            Ok(steps) => steps,
            Err(reason) => {
                return ConvertOutput::Error(StepError {
                    step: "the migrations".into(),
                    channel: String::new(),
                    reason,
                })
            }
        };
        match carry(&steps, self.state.clone()) {
            Ok(carried) => ConvertOutput::Carried(carried),
            Err(error) => ConvertOutput::Error(error),
        }
    }
}

/// Expressions that compiled, so that the schemas of many sessions, read at start, do
/// not compile jaq's standard definitions once per session (a few ms each).
static COMPILED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Distinct expressions [`COMPILED`] remembers; past it each is compiled again.
const COMPILED_MAX: usize = 1024;

/// `code` is a jq expression grove runs (compiled on a thread of its own).
fn check_expression(code: &str) -> Result<(), String> {
    let known = |list: &Vec<String>| list.iter().any(|known| known == code);
    if COMPILED.lock().is_ok_and(|list| known(&list)) {
        return Ok(());
    }
    let owned = code.to_owned();
    deep(move || jq::compile(&owned).map(drop))?;
    if let Ok(mut list) = COMPILED.lock() {
        if list.len() < COMPILED_MAX && !known(&list) {
            list.push(code.to_owned());
        }
    }
    Ok(())
}

/// Stack for jaq's parser and interpreter, which recurse once per level of nesting: an
/// expression of [`MAX_EXPRESSION`] bytes nested as deep as it can be needs a few MiB
/// (measured: 2 MiB overflow at 2,000 parentheses, 64 MiB hold every 4 KiB shape
/// tried), and a daemon thread's stack is 2 MiB. The pages are touched only as used.
const JQ_STACK: usize = 64 << 20;

/// `work` on a thread with [`JQ_STACK`].
fn deep<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("jq".into())
        .stack_size(JQ_STACK)
        .spawn(work)
        .map_err(|e| format!("cannot start jq's thread: {e}"))?
        .join()
        .map_err(|_| "jq failed on this expression".to_owned())?
}

/// jq through jaq, with its core and standard definitions only (no environment, no
/// input, no halting: a conversion sees the one value it converts).
mod jq {
    use jaq_core::load::{Arena, File, Loader};
    use jaq_core::{data, unwrap_valr, Compiler, Ctx, Vars};
    use jaq_json::Val;
    use serde_json::Value;

    type Filter = jaq_core::compile::Filter<jaq_core::Native<data::JustLut<Val>>>;

    pub fn compile(code: &str) -> Result<Filter, String> {
        if code.len() > super::MAX_EXPRESSION {
            return Err(format!(
                "the expression is {} bytes; at most {} are taken",
                code.len(),
                super::MAX_EXPRESSION
            ));
        }
        let defs = jaq_core::defs()
            .chain(jaq_std::defs().filter(|def| !needs_extra(def.name, def.args.len())))
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::base_funs())
            .chain(jaq_json::funs());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, File { code, path: () })
            .map_err(|errors| load_error(code, errors))?;
        Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errors| {
                let names: Vec<String> = errors
                    .into_iter()
                    .flat_map(|(_, errors)| errors)
                    .map(|(name, undefined)| format!("{} `{name}`", undefined.as_str()))
                    .collect();
                format!("`{code}` is not valid jq: undefined {}", names.join(", "))
            })
    }

    /// The standard definitions built on jaq-std's extra natives (I/O, regex, dates,
    /// libm, formats), which grove leaves out to keep its dependencies few; a program
    /// naming one is refused at load as undefined.
    fn needs_extra(name: &str, arity: usize) -> bool {
        const EXTRA: [&str; 27] = [
            "stderr",
            "debug",
            "halt",
            "halt_error",
            "logb",
            "significand",
            "pow10",
            "drem",
            "nexttoward",
            "scalb",
            "gamma",
            "test",
            "scan_",
            "match",
            "capture",
            "splits",
            "sub",
            "gsub",
            "scan",
            "todate",
            "fromdate",
            "@html",
            "@htmld",
            "@uri",
            "@urid",
            "@base64",
            "@base64d",
        ];
        EXTRA.contains(&name) || (name == "split" && arity == 2) || name == "@sh"
    }

    fn load_error(code: &str, errors: jaq_core::load::Errors<&str, ()>) -> String {
        use jaq_core::load::Error;
        let at = |rest: &str| {
            let rest: String = rest.chars().take(20).collect();
            if rest.is_empty() {
                "at the end".to_owned()
            } else {
                format!("at `{rest}`")
            }
        };
        let what: Vec<String> = errors
            .into_iter()
            .flat_map(|(_, error)| match error {
                Error::Io(errors) => errors.into_iter().map(|(_, e)| e).collect::<Vec<_>>(),
                Error::Lex(errors) => errors
                    .into_iter()
                    .map(|(expect, rest)| format!("expected {} {}", expect.as_str(), at(rest)))
                    .collect(),
                Error::Parse(errors) => errors
                    .into_iter()
                    .map(|(expect, rest)| format!("expected {} {}", expect.as_str(), at(rest)))
                    .collect(),
            })
            .collect();
        format!("`{code}` is not valid jq: {}", what.join("; "))
    }

    /// The one value `code` makes of `value`.
    pub fn run(code: &str, value: &Value) -> Result<Value, String> {
        let filter = compile(code)?;
        let input = jaq_json::read::parse_single(value.to_string().as_bytes())
            .map_err(|error| format!("cannot give the value to jq: {error:?}"))?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&filter.lut, Vars::new([]));
        let mut outputs = filter.id.run((ctx, input)).map(unwrap_valr);
        let first = match outputs.next() {
            None => return Err(format!("`{code}` gave no value; a conversion gives one")),
            Some(Err(error)) => return Err(format!("jq error in `{code}`: {error}")),
            Some(Ok(first)) => first,
        };
        if outputs.next().is_some() {
            return Err(format!(
                "`{code}` gave more than one value; a conversion gives one"
            ));
        }
        serde_json::from_str(&first.to_string())
            .map_err(|_| format!("`{code}` gave {first}, which has no JSON form"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn step(from: u32, value: Value) -> Migration {
        let mut value = value;
        value["from"] = from.into();
        value["to"] = (from + 1).into();
        Migration::from_json(0, &value).unwrap()
    }

    #[test]
    fn a_conversion_renames_then_converts_then_maps() {
        let one = step(
            1,
            json!({"convert": {"price": "{amount: ., currency: \"EUR\"}"}}),
        );
        let two = step(
            2,
            json!({"rename": {"price": "cost"}, "map": {"status": {"open": "todo"}}}),
        );
        let state = json!({"price": 250, "status": "open"});
        let carried = carry(&[one, two], state.as_object().unwrap().clone()).unwrap();
        assert_eq!(
            Value::Object(carried.state),
            json!({"cost": {"amount": 250, "currency": "EUR"}, "status": "todo"})
        );
        assert_eq!(carried.converted["cost"], "migration 1 -> 2");
        assert_eq!(carried.converted["status"], "migration 2 -> 3");
    }

    #[test]
    fn jq_errors_name_what_went_wrong() {
        assert!(jq::compile("{a:").err().unwrap().contains("not valid jq"));
        assert!(jq::compile("nosuch(1)").err().unwrap().contains("nosuch"));
        assert!(jq::run(".a", &json!(1)).unwrap_err().contains("jq error"));
        assert!(jq::run("empty", &json!(1))
            .unwrap_err()
            .contains("no value"));
        assert!(jq::run(".[]", &json!([1, 2]))
            .unwrap_err()
            .contains("more than one"));
        assert_eq!(jq::run(".a + 1", &json!({"a": 1})).unwrap(), json!(2));
        // A conversion sees its value only: no environment, input, clock or exit.
        for code in [
            "$ENV",
            "env",
            "input",
            "inputs",
            "halt",
            "now",
            "$__loc__ | halt",
        ] {
            let outcome = jq::compile(code)
                .map(drop)
                .and_then(|()| jq::run(code, &json!(1)));
            assert!(outcome.is_err(), "{code}: {outcome:?}");
        }
        assert_eq!(jq::run("\"é\\n\"", &json!(null)).unwrap(), json!("é\n"));
    }

    #[test]
    fn deeply_nested_expressions_are_compiled_without_overflowing_a_stack() {
        let shapes = [
            "(".repeat(2048) + &")".repeat(2048),
            ".|".repeat(2048),
            "[".repeat(2048) + &"]".repeat(2048),
            "-".repeat(4095) + "1",
            "{a:".repeat(1024) + &"}".repeat(1024),
            "if . then ".repeat(409),
            ". as $x | ".repeat(409),
            "def f: ".repeat(585),
        ];
        for code in shapes {
            let code = code[..code.len().min(MAX_EXPRESSION)].to_string();
            // Run on a small stack, as a daemon's thread is: `deep` gives jaq its own.
            let step = json!({"from": 1, "to": 2, "convert": {"x": code}});
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || Migration::from_json(0, &step).map(drop))
                .unwrap()
                .join()
                .unwrap()
                .ok();
        }
    }

    #[test]
    fn a_chain_with_a_gap_is_refused() {
        let one = step(1, json!({}));
        let mut three = step(3, json!({}));
        assert!(check_chain(&[one.clone(), three.clone()], 4)
            .unwrap_err()
            .contains("gap"));
        three.from = 1;
        assert!(check_chain(&[three], 4).unwrap_err().contains("skips"));
    }
}

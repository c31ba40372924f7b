//! The declared channels of a session's state, read from TOML or JSON.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use serde_json::{Map, Number, Value};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::chain::{check_chain, Migration};
use crate::error::{SchemaError, UnsupportedVersion};
use crate::reducer::{a_type, dedupe, json_type, known_reducers, Reducer};
use crate::State;

/// The newest schema version this build understands.
pub const SCHEMA_VERSION: u32 = 1;

/// Origin named in errors of [`Schema::from_json`], which has no file.
pub const JSON_ORIGIN: &str = "state schema";

const STATE_KEYS: [&str; 4] = ["version", "revision", "channels", "migrations"];
const CHANNEL_KEYS: [&str; 3] = ["reducer", "default", "same_key"];

/// One declared channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelSpec {
    pub reducer: Reducer,
    /// Initial value; `None` means the reducer's own (see [`ChannelSpec::initial_value`]).
    pub default: Option<Value>,
    /// What a `merge` write does to a key the object holds already (behaviour 31).
    pub same_key: SameKey,
}

/// A `merge` channel's rule for a write to a key it holds already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SameKey {
    /// The write's value replaces the held one (later keys win).
    #[default]
    Replace,
    /// A different value is refused as a conflict: the first writer of a key keeps it.
    Refuse,
    /// Objects on both sides are merged key by key, to any depth (a deep merge); any
    /// other value replaces the held one.
    Merge,
}

impl SameKey {
    pub fn name(self) -> &'static str {
        match self {
            SameKey::Replace => "replace",
            SameKey::Refuse => "refuse",
            SameKey::Merge => "merge",
        }
    }

    /// `text` as a mode of `reducer`'s channel `name`; the reason it is not one.
    fn parse(name: &str, reducer: Reducer, text: Option<&str>) -> Result<SameKey, String> {
        let mode = match text {
            Some("replace") => SameKey::Replace,
            Some("refuse") => SameKey::Refuse,
            Some("merge") => SameKey::Merge,
            _ => {
                return Err(format!(
                    "`same_key` of channel `{name}` must be \"replace\", \"refuse\" or \"merge\""
                ))
            }
        };
        if reducer != Reducer::Merge {
            return Err(format!(
                "`same_key` of channel `{name}` applies only to reducer `merge`, not `{reducer}`"
            ));
        }
        Ok(mode)
    }
}

/// The declared channels of a session, with the schema version.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct Schema {
    /// grove's format of the schema ([`SCHEMA_VERSION`]), not the user's.
    pub version: u32,
    /// The user's own version of what the channels mean (`revision = N`; 1 when not
    /// given, so that every schema written before it is revision 1).
    pub revision: u32,
    pub channels: BTreeMap<String, ChannelSpec>,
    /// The chain from older revisions to this one, one step per revision.
    pub migrations: Vec<Migration>,
}

impl ChannelSpec {
    /// A spec whose default fits the reducer. A null default means none,
    /// since TOML cannot write null and JSON senders may spell "absent" so.
    pub fn new(reducer: Reducer, default: Option<Value>) -> Result<ChannelSpec, String> {
        let default = default.filter(|value| !value.is_null());
        if let Some(value) = &default {
            if !reducer.accepts_default(value) {
                return Err(format!(
                    "does not fit reducer `{reducer}`: expected {}, got {}",
                    reducer.expected_default(),
                    a_type(json_type(value))
                ));
            }
        }
        Ok(ChannelSpec {
            reducer,
            default,
            same_key: SameKey::Replace,
        })
    }

    /// The value before any write: the default, else the reducer's empty
    /// value (null for `overwrite`, `max` and `min`).
    pub fn initial_value(&self) -> Value {
        match (&self.default, self.reducer) {
            (Some(Value::Array(items)), Reducer::Union) => Value::Array(dedupe(items)),
            (Some(value), _) => value.clone(),
            (None, reducer) => reducer.empty_value(),
        }
    }

    fn to_json(&self) -> Value {
        let mut spec = Map::new();
        spec.insert("reducer".into(), Value::from(self.reducer.name()));
        if let Some(default) = &self.default {
            spec.insert("default".into(), default.clone());
        }
        // Only when set: a schema without it reads and stores as it always did.
        if self.same_key != SameKey::Replace {
            spec.insert("same_key".into(), Value::from(self.same_key.name()));
        }
        Value::Object(spec)
    }
}

impl Schema {
    /// Parses the `[state]` table of a TOML document (a `.grove.toml` or a
    /// standalone schema file). `origin` is the file name used in error
    /// messages. A document without `[state]` gives `Ok(None)`.
    pub fn from_toml(text: &str, origin: &str) -> Result<Option<Schema>, SchemaError> {
        let source = TomlSource { text, origin };
        let document = DeTable::parse(text).map_err(|error| source.parse_error(&error))?;
        match document.get_ref().get("state") {
            None => Ok(None),
            Some(state) => source.state(state).map(Some),
        }
    }

    /// Reads the wire form: `{"version":1,"channels":{"x":{"reducer":"add","default":0}}}`.
    pub fn from_json(value: &Value) -> Result<Schema, SchemaError> {
        let fail = |reason: String| SchemaError::new(JSON_ORIGIN, reason);
        let object = value.as_object().ok_or_else(|| {
            fail(format!(
                "the schema must be an object, got {}",
                a_type(json_type(value))
            ))
        })?;
        reject_unknown(object.keys().map(String::as_str), &STATE_KEYS, "the schema")
            .map_err(fail)?;
        let version = match object.get("version") {
            Some(Value::Number(number)) => check_version(number.as_i64()).map_err(fail)?,
            Some(_) => return Err(fail(version_reason())),
            None => return Err(fail(missing_version_reason())),
        };
        let channels = match object.get("channels") {
            None => BTreeMap::new(),
            Some(Value::Object(channels)) => json_channels(channels).map_err(fail)?,
            Some(other) => {
                return Err(fail(format!(
                    "`channels` must be an object, got {}",
                    a_type(json_type(other))
                )))
            }
        };
        let revision = match object.get("revision") {
            None => 1,
            Some(Value::Number(number)) => check_revision(number.as_i64()).map_err(fail)?,
            Some(_) => return Err(fail(revision_reason())),
        };
        let migrations = json_migrations(object.get("migrations"), revision).map_err(fail)?;
        Ok(Schema {
            version,
            revision,
            channels,
            migrations,
        })
    }

    /// The wire form read by [`Schema::from_json`].
    pub fn to_json(&self) -> Value {
        let channels: Map<String, Value> = self
            .channels
            .iter()
            .map(|(name, spec)| (name.clone(), spec.to_json()))
            .collect();
        let mut schema = Map::new();
        schema.insert("version".into(), Value::from(self.version));
        // Only when set: a schema without them reads and stores as it always did.
        if self.revision != 1 {
            schema.insert("revision".into(), Value::from(self.revision));
        }
        schema.insert("channels".into(), Value::Object(channels));
        if !self.migrations.is_empty() {
            let steps = self.migrations.iter().map(Migration::to_json).collect();
            schema.insert("migrations".into(), Value::Array(steps));
        }
        Value::Object(schema)
    }

    /// No channels, revision 1: a session created without a schema.
    pub fn empty() -> Schema {
        Schema {
            version: SCHEMA_VERSION,
            revision: 1,
            channels: BTreeMap::new(),
            migrations: Vec::new(),
        }
    }

    /// Every declared channel at its initial value.
    pub fn initial_state(&self) -> State {
        self.channels
            .iter()
            .map(|(name, spec)| (name.clone(), spec.initial_value()))
            .collect()
    }

    /// The spec of a declared channel.
    pub fn channel(&self, name: &str) -> Option<&ChannelSpec> {
        self.channels.get(name)
    }

    /// Declared channel names, sorted.
    pub fn channel_names(&self) -> Vec<String> {
        self.channels.keys().cloned().collect()
    }

    /// Refuses a stored schema version newer than this build understands
    /// (behaviour 22), so that a newer session is never read with old rules.
    pub fn check_stored_version(version: u32) -> Result<(), UnsupportedVersion> {
        if version > SCHEMA_VERSION {
            return Err(UnsupportedVersion {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }
}

impl TryFrom<Value> for Schema {
    type Error = SchemaError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        Schema::from_json(&value)
    }
}

impl From<Schema> for Value {
    fn from(schema: Schema) -> Value {
        schema.to_json()
    }
}

fn json_channels(channels: &Map<String, Value>) -> Result<BTreeMap<String, ChannelSpec>, String> {
    channels
        .iter()
        .map(|(name, spec)| Ok((name.clone(), json_channel(name, spec)?)))
        .collect()
}

fn json_channel(name: &str, spec: &Value) -> Result<ChannelSpec, String> {
    check_channel_name(name)?;
    let Value::Object(spec) = spec else {
        return Err(format!(
            "channel `{name}` must be an object like {{\"reducer\": \"add\"}}"
        ));
    };
    reject_unknown(
        spec.keys().map(String::as_str),
        &CHANNEL_KEYS,
        &format!("channel `{name}`"),
    )?;
    let reducer = match spec.get("reducer") {
        Some(Value::String(reducer)) => parse_reducer(name, reducer)?,
        Some(_) => return Err(reducer_not_string(name)),
        None => return Err(missing_reducer(name)),
    };
    let mut channel = ChannelSpec::new(reducer, spec.get("default").cloned())
        .map_err(|reason| format!("default of channel `{name}` {reason}"))?;
    if let Some(mode) = spec.get("same_key") {
        channel.same_key = SameKey::parse(name, reducer, mode.as_str())?;
    }
    Ok(channel)
}

fn check_version(version: Option<i64>) -> Result<u32, String> {
    let version = version
        .filter(|version| *version > 0)
        .and_then(|version| u32::try_from(version).ok())
        .ok_or_else(version_reason)?;
    if version > SCHEMA_VERSION {
        return Err(format!(
            "state schema version {version} is newer than this grove understands (up to \
             {SCHEMA_VERSION}); `version` is grove's format of the schema: to number your \
             own schema's meaning, keep `version = {SCHEMA_VERSION}` and write \
             `revision = {version}`"
        ));
    }
    Ok(version)
}

fn check_revision(revision: Option<i64>) -> Result<u32, String> {
    revision
        .filter(|revision| *revision > 0)
        .and_then(|revision| u32::try_from(revision).ok())
        .ok_or_else(revision_reason)
}

fn revision_reason() -> String {
    "`revision` (the schema's own version) must be a positive integer".to_owned()
}

/// The `migrations` list, a whole chain ending at `revision`.
fn json_migrations(value: Option<&Value>, revision: u32) -> Result<Vec<Migration>, String> {
    let steps = match value {
        None => return Ok(Vec::new()),
        Some(Value::Array(steps)) => steps,
        Some(other) => {
            return Err(format!(
                "`migrations` must be a list of steps ([[state.migrations]]), got {}",
                a_type(json_type(other))
            ))
        }
    };
    let steps = steps
        .iter()
        .enumerate()
        .map(|(index, step)| Migration::from_json(index, step))
        .collect::<Result<Vec<_>, _>>()?;
    check_chain(&steps, revision)?;
    Ok(steps)
}

fn version_reason() -> String {
    format!("`version` must be a positive integer (the current schema version is {SCHEMA_VERSION})")
}

fn missing_version_reason() -> String {
    format!("the state schema has no `version` (add `version = {SCHEMA_VERSION}`)")
}

fn check_channel_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("a channel name must not be empty or blank".to_owned());
    }
    Ok(())
}

fn parse_reducer(channel: &str, name: &str) -> Result<Reducer, String> {
    name.parse()
        .map_err(|error| format!("channel `{channel}`: {error}"))
}

fn reducer_not_string(channel: &str) -> String {
    format!(
        "the reducer of channel `{channel}` must be a string, one of: {}",
        known_reducers()
    )
}

fn missing_reducer(channel: &str) -> String {
    format!(
        "channel `{channel}` has no `reducer` (one of: {})",
        known_reducers()
    )
}

fn reject_unknown<'k>(
    keys: impl IntoIterator<Item = &'k str>,
    known: &[&str],
    place: &str,
) -> Result<(), String> {
    match keys.into_iter().find(|key| !known.contains(key)) {
        Some(key) => Err(unknown_key(key, known, place)),
        None => Ok(()),
    }
}

fn unknown_key(key: &str, known: &[&str], place: &str) -> String {
    format!(
        "unknown key `{key}` in {place} (known keys: {})",
        known.join(", ")
    )
}

/// A TOML document being read, to turn byte spans into `file:line:column`.
struct TomlSource<'a> {
    text: &'a str,
    origin: &'a str,
}

type TomlKey<'i> = Spanned<Cow<'i, str>>;
type TomlValue<'i> = Spanned<DeValue<'i>>;

impl TomlSource<'_> {
    fn error(&self, span: Range<usize>, reason: impl Into<String>) -> SchemaError {
        SchemaError::at(
            self.origin,
            Some(line_column(self.text, span.start)),
            reason,
        )
    }

    fn parse_error(&self, error: &toml::de::Error) -> SchemaError {
        let position = error.span().map(|span| line_column(self.text, span.start));
        SchemaError::at(self.origin, position, error.message().trim_end())
    }

    fn state(&self, state: &TomlValue<'_>) -> Result<Schema, SchemaError> {
        let table = state
            .get_ref()
            .as_table()
            .ok_or_else(|| self.error(state.span(), "`state` must be a table ([state])"))?;
        self.reject_unknown(table, &STATE_KEYS, "[state]")?;
        let version = match table.get("version") {
            Some(version) => self.version(version)?,
            None => return Err(self.error(state.span(), missing_version_reason())),
        };
        let channels = match table.get("channels") {
            Some(channels) => self.channels(channels)?,
            None => BTreeMap::new(),
        };
        let revision = match table.get("revision") {
            None => 1,
            Some(revision) => check_revision(self.integer(revision))
                .map_err(|reason| self.error(revision.span(), reason))?,
        };
        let migrations = match table.get("migrations") {
            None => Vec::new(),
            Some(steps) => {
                let json = self.json(steps)?;
                json_migrations(Some(&json), revision)
                    .map_err(|reason| self.error(steps.span(), reason))?
            }
        };
        Ok(Schema {
            version,
            revision,
            channels,
            migrations,
        })
    }

    fn integer(&self, value: &TomlValue<'_>) -> Option<i64> {
        value
            .get_ref()
            .as_integer()
            .and_then(|integer| i64::from_str_radix(integer.as_str(), integer.radix()).ok())
    }

    fn version(&self, version: &TomlValue<'_>) -> Result<u32, SchemaError> {
        check_version(self.integer(version)).map_err(|reason| self.error(version.span(), reason))
    }

    fn channels(
        &self,
        channels: &TomlValue<'_>,
    ) -> Result<BTreeMap<String, ChannelSpec>, SchemaError> {
        let table = channels.get_ref().as_table().ok_or_else(|| {
            self.error(
                channels.span(),
                "`channels` must be a table ([state.channels])",
            )
        })?;
        table
            .iter()
            .map(|(name, spec)| Ok((name.get_ref().to_string(), self.channel(name, spec)?)))
            .collect()
    }

    fn channel(
        &self,
        name: &TomlKey<'_>,
        spec: &TomlValue<'_>,
    ) -> Result<ChannelSpec, SchemaError> {
        check_channel_name(name.get_ref()).map_err(|reason| self.error(name.span(), reason))?;
        let table = spec.get_ref().as_table().ok_or_else(|| {
            let reason = format!(
                "channel `{}` must be a table like {{ reducer = \"add\" }}",
                name.get_ref()
            );
            self.error(spec.span(), reason)
        })?;
        self.reject_unknown(
            table,
            &CHANNEL_KEYS,
            &format!("channel `{}`", name.get_ref()),
        )?;
        let reducer = self.reducer(name, spec, table)?;
        let mut channel = match table.get("default") {
            None => ChannelSpec::new(reducer, None).map_err(|r| self.error(spec.span(), r))?,
            Some(default) => {
                let value = self.json(default)?;
                ChannelSpec::new(reducer, Some(value)).map_err(|reason| {
                    self.error(
                        default.span(),
                        format!("default of channel `{}` {reason}", name.get_ref()),
                    )
                })?
            }
        };
        if let Some(mode) = table.get("same_key") {
            channel.same_key = SameKey::parse(name.get_ref(), reducer, mode.get_ref().as_str())
                .map_err(|reason| self.error(mode.span(), reason))?;
        }
        Ok(channel)
    }

    fn reducer(
        &self,
        name: &TomlKey<'_>,
        spec: &TomlValue<'_>,
        table: &DeTable<'_>,
    ) -> Result<Reducer, SchemaError> {
        let Some(reducer) = table.get("reducer") else {
            return Err(self.error(spec.span(), missing_reducer(name.get_ref())));
        };
        let Some(text) = reducer.get_ref().as_str() else {
            return Err(self.error(reducer.span(), reducer_not_string(name.get_ref())));
        };
        parse_reducer(name.get_ref(), text).map_err(|reason| self.error(reducer.span(), reason))
    }

    fn reject_unknown(
        &self,
        table: &DeTable<'_>,
        known: &[&str],
        place: &str,
    ) -> Result<(), SchemaError> {
        match table
            .keys()
            .find(|key| !known.contains(&key.get_ref().as_ref()))
        {
            Some(key) => Err(self.error(key.span(), unknown_key(key.get_ref(), known, place))),
            None => Ok(()),
        }
    }

    /// A TOML value as JSON. Datetimes and non-finite floats have no JSON form.
    fn json(&self, value: &TomlValue<'_>) -> Result<Value, SchemaError> {
        let fail = |reason: &str| self.error(value.span(), reason);
        Ok(match value.get_ref() {
            DeValue::String(text) => Value::String(text.to_string()),
            DeValue::Boolean(flag) => Value::Bool(*flag),
            DeValue::Integer(integer) => i64::from_str_radix(integer.as_str(), integer.radix())
                .map(Value::from)
                .map_err(|_| fail("integer out of range"))?,
            DeValue::Float(float) => float
                .as_str()
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| fail("a JSON number must be finite (no inf or nan)"))?,
            DeValue::Datetime(_) => {
                return Err(fail(
                    "a TOML date or time has no JSON form; write it as a string",
                ))
            }
            DeValue::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.json(item))
                    .collect::<Result<_, _>>()?,
            ),
            DeValue::Table(table) => Value::Object(
                table
                    .iter()
                    .map(|(key, item)| Ok((key.get_ref().to_string(), self.json(item)?)))
                    .collect::<Result<_, SchemaError>>()?,
            ),
        })
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.matches('\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn line_column_counts_from_one_in_characters() {
        let text = "ab\nçd\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 1));
        assert_eq!(line_column(text, 5), (2, 2)); // after the 2-byte ç
        assert_eq!(line_column(text, 99), (3, 1));
    }
}

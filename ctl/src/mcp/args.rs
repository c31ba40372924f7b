//! The arguments of each tool. Unknown arguments are refused, as the socket refuses
//! unknown params: a misspelled `timout_seconds` must not silently mean "no timeout".
//! A tool whose arguments are a method's params as they are takes the protocol's own
//! params type instead (see `tools::forward`).

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Reads a tool's arguments; the error names the tool and says what to change.
pub fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments).map_err(|e| {
        format!("bad arguments for {tool}: {e}; see the tool's input schema for what it takes")
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spawn {
    #[serde(default)]
    pub argv: Vec<String>,
    pub repo: Option<String>,
    pub name: Option<String>,
    pub base: Option<String>,
    pub session: Option<String>,
    /// TOML text with a `[state]` table.
    pub schema: Option<String>,
    pub schema_file: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub env_clear: bool,
    #[serde(default)]
    pub env_keep: Vec<String>,
    pub timeout_seconds: Option<u64>,
    pub max_files: Option<u64>,
    pub max_procs: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub jail: Option<bool>,
    #[serde(default)]
    pub jail_write: Vec<String>,
    #[serde(default)]
    pub keep: bool,
    #[serde(default)]
    pub sparse: Vec<String>,
    #[serde(default)]
    pub tty: bool,
    #[serde(default)]
    pub keep_stdin: bool,
    /// A preset (`grove agents`) instead of argv.
    pub agent: Option<String>,
    pub prompt: Option<String>,
    #[serde(default)]
    pub headless: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendInput {
    pub id: String,
    pub text: String,
    /// Default true: press Enter after the text.
    pub enter: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct List {
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wait {
    pub ids: Vec<String>,
    pub mode: Option<String>,
    pub until: Option<String>,
    pub timeout_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logs {
    pub id: String,
    #[serde(default)]
    pub offset: u64,
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Review {
    pub id: Option<String>,
    pub repo: Option<String>,
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlaps {
    #[serde(default)]
    pub hunks: bool,
    pub repo: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Merge {
    pub id: String,
    #[serde(default)]
    pub squash: bool,
    #[serde(default)]
    pub rebase: bool,
    pub into: Option<String>,
    #[serde(default)]
    pub delete: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub id: String,
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateGet {
    pub session: String,
    pub at: Option<u64>,
    #[serde(default)]
    pub migrate: bool,
    pub channel: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateWrite {
    pub channel: String,
    pub value: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateUpdate {
    pub session: String,
    pub writes: Vec<StateWrite>,
    pub base: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateHistory {
    pub session: String,
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateFork {
    pub session: String,
    pub at: u64,
    pub new_session: String,
    #[serde(default)]
    pub migrate: bool,
}

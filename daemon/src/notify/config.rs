//! `[notify]` of `config.toml`: which agent events run which command of the user's.

use crate::toml_table::{flag, only_known_keys, strings};
use std::time::Duration;

/// The keys `[notify]` has.
const KEYS: &[&str] = &["command", "events", "desktop", "window"];

/// The events a user can be told about.
pub const EVENTS: &[&str] = &["waiting", "exited", "failed"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// Run with the agent's id, name, event and status in its environment; `None`: only
    /// the desktop notification.
    pub command: Option<Vec<String>>,
    /// Of [`EVENTS`]. `exited` is every end (a failure too); `failed` is an end that was
    /// not a success.
    pub events: Vec<String>,
    /// Also send a desktop notification (`notify-send`) where a session bus exists.
    pub desktop: bool,
    /// Events within this long of the first one are told in one run, as a summary.
    pub window: Duration,
}

impl NotifyConfig {
    /// The `[notify]` table of `origin`.
    pub fn parse(value: &toml::Value, origin: &str) -> Result<NotifyConfig, String> {
        let at = format!("{origin}: [notify]");
        let table = value
            .as_table()
            .ok_or_else(|| format!("{at} must be a table"))?;
        only_known_keys(table, KEYS, &at, "[notify]")?;
        let command = strings(table, "command", &at)?;
        if command
            .as_ref()
            .is_some_and(|c| c.first().is_none_or(String::is_empty))
        {
            return Err(format!(
                "{at}: `command` must name a program, e.g. [\"notify-me\", \"--urgent\"]"
            ));
        }
        let events = strings(table, "events", &at)?
            .unwrap_or_else(|| vec!["waiting".into(), "failed".into()]);
        if let Some(bad) = events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
            return Err(format!(
                "{at}: unknown event `{bad}` in `events`; choose from {}",
                EVENTS.join(", ")
            ));
        }
        let desktop = flag(table, "desktop", true, &at)?;
        let window = match table.get("window") {
            None => Duration::from_secs(1),
            Some(toml::Value::String(text)) => humantime::parse_duration(text)
                .map_err(|e| format!("{at}: `window` = {text:?}: {e} (try 1s or 500ms)"))?,
            Some(toml::Value::Integer(ms)) if *ms >= 0 => Duration::from_millis(*ms as u64),
            Some(_) => return Err(format!("{at}: `window` must be a duration such as \"1s\"")),
        };
        Ok(NotifyConfig {
            command,
            events,
            desktop,
            window,
        })
    }

    /// Whether an agent event of `kind` (`waiting`, `exited` or `failed`) is wanted.
    pub fn wants(&self, kind: &str) -> bool {
        let chose = |e: &str| self.events.iter().any(|x| x == e);
        chose(kind) || (kind == "failed" && chose("exited"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<NotifyConfig, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        NotifyConfig::parse(&table["notify"], "c.toml")
    }

    #[test]
    fn settings_parse_and_bad_ones_are_named() {
        let ok = parse("[notify]\ncommand = [\"x\"]\nevents = [\"exited\"]\nwindow = \"2s\"\n")
            .expect("valid");
        assert!(ok.wants("exited") && ok.wants("failed") && !ok.wants("waiting"));
        assert_eq!(ok.window, Duration::from_secs(2));
        let only_failed = parse("[notify]\nevents = [\"failed\"]\n").expect("valid");
        assert!(only_failed.wants("failed") && !only_failed.wants("exited"));
        for bad in [
            "[notify]\nevents = [\"done\"]\n",
            "[notify]\ncommand = []\n",
            "[notify]\ncmd = [\"x\"]\n",
            "[notify]\nwindow = \"soon\"\n",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.starts_with("c.toml: [notify]"), "{e}");
        }
    }
}

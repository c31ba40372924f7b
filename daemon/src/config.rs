//! The daemon's settings: defaults, then `config.toml`, then `GROVE_*` environment
//! variables. Each value remembers where it came from (`grove config` shows it).

use grove_proto::paths::{Dirs, PathError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub dirs: Dirs,
    /// Time between SIGTERM and SIGKILL when an agent's tree is stopped.
    pub kill_grace: Duration,
    /// Most grove worktrees on disk at once; spawns beyond wait in the queue.
    pub max_worktrees: usize,
    /// Disk usage (fraction of the worktree root's filesystem) that starts cleanup.
    pub disk_high: f64,
    /// Usage cleanup aims to get under.
    pub disk_low: f64,
    pub disk_check_interval: Duration,
    /// How often the prune pass runs, and how soon after start the first one does.
    pub prune_interval: Duration,
    pub prune_first_delay: Duration,
    /// Worktrees of no live agent idle longer than this are salvaged and removed.
    pub max_idle: Duration,
    /// Records and logs of finished agents older than this are deleted.
    pub retention: Duration,
    /// How deep agents may spawn agents (an agent the user spawned is at depth 0).
    pub max_depth: u32,
    /// Protocol version this daemon speaks; only tests change it.
    pub protocol_version: u32,
    /// `checkout.workers` for `git worktree add`.
    pub checkout_workers: usize,
    /// Where each setting came from.
    pub sources: BTreeMap<&'static str, Source>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Default,
    File(PathBuf),
    Environment(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Paths(#[from] PathError),
    #[error("{origin}: `{key}` = {value:?}: {reason}")]
    Invalid {
        origin: String,
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
}

/// Every setting: its key in `config.toml`, its variable, its default as text.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("max_worktrees", "GROVE_MAX_WORKTREES", "20"),
    ("disk_high", "GROVE_DISK_HIGH", "80"),
    ("disk_low", "GROVE_DISK_LOW", "50"),
    ("disk_check_interval", "GROVE_DISK_CHECK_INTERVAL", "60s"),
    ("prune_interval", "GROVE_PRUNE_INTERVAL", "24h"),
    ("prune_first_delay", "GROVE_PRUNE_FIRST_DELAY", "5m"),
    ("max_idle", "GROVE_MAX_IDLE", "24h"),
    ("retention", "GROVE_RETENTION", "30days"),
    ("kill_grace", "GROVE_KILL_GRACE", "5s"),
    ("max_depth", "GROVE_MAX_DEPTH", "3"),
];

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        let dirs = Dirs::from_env()?;
        let layers = Layers::load(&dirs.config_file)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut sources = BTreeMap::new();
        let mut get = |key: &'static str| layers.get(key, &mut sources);
        let config = Config {
            max_worktrees: get("max_worktrees")?.number()? as usize,
            disk_high: get("disk_high")?.percent()?,
            disk_low: get("disk_low")?.percent()?,
            disk_check_interval: get("disk_check_interval")?.duration()?,
            prune_interval: get("prune_interval")?.duration()?,
            prune_first_delay: get("prune_first_delay")?.duration()?,
            max_idle: get("max_idle")?.duration()?,
            retention: get("retention")?.duration()?,
            kill_grace: get("kill_grace")?.duration()?,
            max_depth: get("max_depth")?.number()? as u32,
            protocol_version: match std::env::var("GROVE_TEST_PROTOCOL_VERSION") {
                Ok(v) => v.parse().unwrap_or(0),
                Err(_) => grove_proto::PROTOCOL_VERSION,
            },
            checkout_workers: cores,
            sources,
            dirs,
        };
        if config.disk_low >= config.disk_high {
            return Err(ConfigError::Invalid {
                origin: "configuration".into(),
                key: "disk_low",
                value: format!("{}", config.disk_low * 100.0),
                reason: "must be below disk_high".into(),
            });
        }
        Ok(config)
    }
}

/// The file's values, read once.
struct Layers {
    file: Option<(PathBuf, toml::Table)>,
}

/// One setting's raw value and where it came from, ready to be parsed.
struct Raw {
    key: &'static str,
    text: String,
    origin: String,
}

impl Layers {
    fn load(path: &std::path::Path) -> Result<Layers, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Layers { file: None }),
            Err(e) => {
                return Err(ConfigError::File {
                    path: path.into(),
                    reason: e.to_string(),
                })
            }
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::File {
                path: path.into(),
                reason: e.to_string(),
            })?;
        if let Some(unknown) = table
            .keys()
            .find(|k| !SETTINGS.iter().any(|(key, _, _)| key == k))
        {
            return Err(ConfigError::File {
                path: path.into(),
                reason: format!(
                    "unknown setting `{unknown}`; known: {}",
                    SETTINGS
                        .iter()
                        .map(|(k, _, _)| *k)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(Layers {
            file: Some((path.into(), table)),
        })
    }

    fn get(
        &self,
        key: &'static str,
        sources: &mut BTreeMap<&'static str, Source>,
    ) -> Result<Raw, ConfigError> {
        let (_, var, default) = SETTINGS
            .iter()
            .find(|(k, _, _)| *k == key)
            .copied()
            .unwrap_or((key, "", ""));
        if let Ok(text) = std::env::var(var) {
            sources.insert(key, Source::Environment(var.into()));
            return Ok(Raw {
                key,
                text,
                origin: var.into(),
            });
        }
        if let Some((path, table)) = &self.file {
            if let Some(value) = table.get(key) {
                sources.insert(key, Source::File(path.clone()));
                let text = match value {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                return Ok(Raw {
                    key,
                    text,
                    origin: path.display().to_string(),
                });
            }
        }
        sources.insert(key, Source::Default);
        Ok(Raw {
            key,
            text: default.into(),
            origin: "default".into(),
        })
    }
}

impl Raw {
    fn invalid(&self, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.clone(),
            key: self.key,
            value: self.text.clone(),
            reason: reason.into(),
        }
    }

    fn number(&self) -> Result<u64, ConfigError> {
        self.text
            .trim()
            .parse()
            .map_err(|_| self.invalid("expected a whole number"))
    }

    /// A percentage 1..=100 (or a fraction 0..1), as a fraction.
    fn percent(&self) -> Result<f64, ConfigError> {
        let text = self.text.trim().trim_end_matches('%');
        let value: f64 = text
            .parse()
            .map_err(|_| self.invalid("expected a percentage, e.g. 80"))?;
        let fraction = if value > 1.0 { value / 100.0 } else { value };
        if !(0.0..=1.0).contains(&fraction) || fraction == 0.0 {
            return Err(self.invalid("expected a percentage between 1 and 100"));
        }
        Ok(fraction)
    }

    /// "90s", "24h", "30days", or a bare number of milliseconds.
    fn duration(&self) -> Result<Duration, ConfigError> {
        let text = self.text.trim();
        if let Ok(ms) = text.parse::<u64>() {
            return Ok(Duration::from_millis(ms));
        }
        humantime::parse_duration(text)
            .map_err(|e| self.invalid(&format!("expected a duration such as 90s or 24h ({e})")))
    }
}

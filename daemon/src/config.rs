//! The daemon's settings: defaults, then `config.toml`, then `GROVE_*` environment
//! variables. Each value remembers where it came from (`grove config` shows it).

mod text;
pub use text::{all as settings_text, value_text};

use grove_proto::paths::{Dirs, PathError};
use grove_proto::types::Limits;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub dirs: Dirs,
    /// Time between SIGTERM and SIGKILL when an agent's tree is stopped.
    pub kill_grace: Duration,
    /// Quiet output for this long, with the agent reading its terminal, is "waiting".
    pub waiting_after: Duration,
    /// Pass OSC 8 links in an agent's output on to `grove attach`.
    pub attach_links: bool,
    /// Pass the title an agent sets on to `grove attach`.
    pub attach_title: bool,
    /// Most grove worktrees on disk at once; spawns beyond wait in the queue.
    pub max_worktrees: usize,
    /// Warm-pool worktrees kept per repository that had a spawn lately (inside the cap).
    pub pool_size: usize,
    /// How long after a repository's last spawn its warm pool is kept.
    pub pool_idle: Duration,
    /// How long a repository's lane keeps it open (its packs mapped) after its last job.
    pub repo_idle_release: Duration,
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
    /// How many live children (queued ones included) one agent may have at once.
    pub agent_max_children: usize,
    /// How many of one agent's children may wait in the queue at once.
    pub agent_max_queued: usize,
    /// Protocol version this daemon speaks; only tests change it.
    pub protocol_version: u32,
    /// `checkout.workers` for `git worktree add`.
    pub checkout_workers: usize,
    /// Jail agents (Landlock) unless a spawn says `--no-jail`.
    pub jail: bool,
    /// More paths every jailed agent may write beneath.
    pub jail_write: Vec<PathBuf>,
    /// More paths a jailed agent sees (read-only) beside what its view shows anyway.
    pub jail_show: Vec<PathBuf>,
    /// More paths hidden from a jailed agent, even inside a shown directory.
    pub jail_hide: Vec<PathBuf>,
    /// Limits for spawns that give none of their own.
    pub default_limits: Limits,
    /// Timeout for spawns that give none of their own.
    pub default_timeout: Option<Duration>,
    /// Give each agent a cgroup v2 of its own where the kernel allows.
    pub cgroup: bool,
    /// Most client connections served at once; more are answered with an error and
    /// closed.
    pub max_connections: usize,
    /// Connections one agent's processes may hold open at once.
    pub agent_max_connections: usize,
    /// Connections the agents of one tree (a user-spawned agent and its descendants)
    /// may hold open at once.
    pub tree_max_connections: usize,
    /// Variables of the caller that an `--env-clear` spawn still passes on.
    pub env_allow: Vec<String>,
    /// Files larger than this are left out of a salvage (recorded; the worktree kept).
    pub salvage_max_file: u64,
    /// Most bytes of output one agent's log keeps on disk (the newest half or more).
    pub log_max: u64,
    /// Who authors the commits grove makes for agents (grove is always the committer).
    pub commit_author: CommitAuthor,
    /// Sizes and checkpoint counts of sessions' shared state.
    pub state_limits: StateLimits,
    /// When sessions move from one lifecycle state to the next.
    pub session_lifecycle: SessionLifecycle,
    /// Address of the Prometheus endpoint (`GET /metrics`); none by default.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Record metrics at all (off only to measure what recording costs).
    pub metrics: bool,
    pub slo: SloConfig,
    /// `[notify]`: what the user is told about agents, and how; `None`: nothing.
    pub notify: Option<crate::notify::NotifyConfig>,
    /// Where each setting came from.
    pub sources: BTreeMap<&'static str, Source>,
}

/// The service levels' objectives and how they are checked.
#[derive(Debug, Clone)]
pub struct SloConfig {
    pub checkpoint_save_p95: Duration,
    pub restore_p95: Duration,
    pub start_ready_p99: Duration,
    pub cold_start_p99: Duration,
    pub session_state_p99: u64,
    pub checkpoints_p99: u64,
    pub cleanup_lag: Duration,
    pub schema_mismatches: u64,
    pub agents_lost: u64,
    /// Latencies and counts are taken over this much of the recent past.
    pub window: Duration,
    pub check_interval: Duration,
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

/// Limits of sessions' shared state; a write over one is refused before anything changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Most bytes of one batch of writes, as JSON.
    pub max_write: u64,
    /// Most bytes of a session's state, as JSON, after a write.
    pub max_session: u64,
    /// Checkpoints kept readable per session; older ones are compacted (pinned ones stay).
    pub checkpoint_keep: u64,
    /// Bytes the agents of one tree may hold in grove.db (`sessions::budget`); the
    /// user's writes never count.
    pub tree_max_db: u64,
}

impl Default for StateLimits {
    fn default() -> Self {
        StateLimits {
            max_write: 256 << 10,
            max_session: 2 << 20,
            checkpoint_keep: 400,
            tree_max_db: 256 << 20,
        }
    }
}

/// When sessions move along: active, idle, suspended, archived, deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLifecycle {
    /// Active while an agent of it is live or it was written this recently.
    pub idle_after: Duration,
    /// No activity (read or write) this long: its head leaves memory.
    pub suspend_after: Duration,
    pub archive_after: Duration,
    /// No activity this long: deleted, with an audit row.
    pub delete_after: Duration,
    /// How often the pass that moves sessions along runs.
    pub gc_interval: Duration,
    /// Most session heads kept in memory; the least recently used go first.
    pub cache: usize,
}

impl Default for SessionLifecycle {
    fn default() -> Self {
        SessionLifecycle {
            idle_after: Duration::from_secs(30 * 60),
            suspend_after: Duration::from_secs(30 * 60),
            archive_after: Duration::from_secs(7 * 24 * 3600),
            delete_after: Duration::from_secs(90 * 24 * 3600),
            gc_interval: Duration::from_secs(5 * 60),
            cache: 1000,
        }
    }
}

/// Tables of `config.toml` besides the settings: `[agents.NAME]` presets (read by the
/// client, see `presets`) and `[notify]`.
pub const TABLES: &[&str] = &["agents", "notify"];

/// Every setting: its key in `config.toml`, its variable, its default as text.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("max_worktrees", "GROVE_MAX_WORKTREES", "20"),
    ("pool_size", "GROVE_POOL_SIZE", "2"),
    ("pool_idle", "GROVE_POOL_IDLE", "1h"),
    ("repo_idle_release", "GROVE_REPO_IDLE_RELEASE", "60s"),
    ("disk_high", "GROVE_DISK_HIGH", "80"),
    ("disk_low", "GROVE_DISK_LOW", "50"),
    ("disk_check_interval", "GROVE_DISK_CHECK_INTERVAL", "60s"),
    ("prune_interval", "GROVE_PRUNE_INTERVAL", "24h"),
    ("prune_first_delay", "GROVE_PRUNE_FIRST_DELAY", "5m"),
    ("max_idle", "GROVE_MAX_IDLE", "24h"),
    ("retention", "GROVE_RETENTION", "30days"),
    ("kill_grace", "GROVE_KILL_GRACE", "5s"),
    ("waiting_after", "GROVE_WAITING_AFTER", "2s"),
    ("attach_links", "GROVE_ATTACH_LINKS", "false"),
    ("attach_title", "GROVE_ATTACH_TITLE", "false"),
    ("max_depth", "GROVE_MAX_DEPTH", "3"),
    ("agent_max_children", "GROVE_AGENT_MAX_CHILDREN", "16"),
    ("agent_max_queued", "GROVE_AGENT_MAX_QUEUED", "8"),
    ("jail", "GROVE_JAIL", "false"),
    ("jail_write", "GROVE_JAIL_WRITE", ""),
    ("jail_show", "GROVE_JAIL_SHOW", ""),
    ("jail_hide", "GROVE_JAIL_HIDE", ""),
    ("memory", "GROVE_MEMORY", ""),
    ("cpu_time", "GROVE_CPU_TIME", ""),
    ("max_files", "GROVE_MAX_FILES", ""),
    ("max_procs", "GROVE_MAX_PROCS", ""),
    ("timeout", "GROVE_TIMEOUT", ""),
    ("cgroup", "GROVE_CGROUP", "true"),
    ("max_connections", "GROVE_MAX_CONNECTIONS", "512"),
    ("agent_max_connections", "GROVE_AGENT_MAX_CONNECTIONS", "64"),
    ("tree_max_connections", "GROVE_TREE_MAX_CONNECTIONS", "128"),
    ("tree_max_db", "GROVE_TREE_MAX_DB", "256M"),
    ("env_allow", "GROVE_ENV_ALLOW", ""),
    ("salvage_max_file", "GROVE_SALVAGE_MAX_FILE", "100M"),
    ("log_max", "GROVE_LOG_MAX", "64M"),
    ("commit_author", "GROVE_COMMIT_AUTHOR", "user"),
    ("state_max_write", "GROVE_STATE_MAX_WRITE", "256K"),
    ("state_max_session", "GROVE_STATE_MAX_SESSION", "2M"),
    ("checkpoint_keep", "GROVE_CHECKPOINT_KEEP", "400"),
    ("session_idle", "GROVE_SESSION_IDLE", "30m"),
    ("session_suspend", "GROVE_SESSION_SUSPEND", "30m"),
    ("session_archive", "GROVE_SESSION_ARCHIVE", "7days"),
    ("session_delete", "GROVE_SESSION_DELETE", "90days"),
    ("session_gc_interval", "GROVE_SESSION_GC_INTERVAL", "5m"),
    ("session_cache", "GROVE_SESSION_CACHE", "1000"),
    ("metrics_listen", "GROVE_METRICS_LISTEN", ""),
    ("metrics", "GROVE_METRICS", "true"),
    (
        "slo_checkpoint_save_p95",
        "GROVE_SLO_CHECKPOINT_SAVE_P95",
        "80ms",
    ),
    ("slo_restore_p95", "GROVE_SLO_RESTORE_P95", "50ms"),
    ("slo_start_ready_p99", "GROVE_SLO_START_READY_P99", "500ms"),
    ("slo_cold_start_p99", "GROVE_SLO_COLD_START_P99", "100ms"),
    ("slo_session_state_p99", "GROVE_SLO_SESSION_STATE_P99", "2M"),
    ("slo_checkpoints_p99", "GROVE_SLO_CHECKPOINTS_P99", "500"),
    ("slo_cleanup_lag", "GROVE_SLO_CLEANUP_LAG", "600s"),
    ("slo_schema_mismatches", "GROVE_SLO_SCHEMA_MISMATCHES", "0"),
    ("slo_agents_lost", "GROVE_SLO_AGENTS_LOST", "0"),
    ("slo_window", "GROVE_SLO_WINDOW", "1h"),
    ("slo_check_interval", "GROVE_SLO_CHECK_INTERVAL", "30s"),
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
            pool_size: get("pool_size")?.number()? as usize,
            pool_idle: get("pool_idle")?.duration()?,
            repo_idle_release: get("repo_idle_release")?.duration()?,
            disk_high: get("disk_high")?.percent()?,
            disk_low: get("disk_low")?.percent()?,
            disk_check_interval: get("disk_check_interval")?.duration()?,
            prune_interval: get("prune_interval")?.duration()?,
            prune_first_delay: get("prune_first_delay")?.duration()?,
            max_idle: get("max_idle")?.duration()?,
            retention: get("retention")?.duration()?,
            kill_grace: get("kill_grace")?.duration()?,
            waiting_after: get("waiting_after")?.duration()?,
            attach_links: get("attach_links")?.boolean()?,
            attach_title: get("attach_title")?.boolean()?,
            max_depth: get("max_depth")?.number()? as u32,
            agent_max_children: get("agent_max_children")?.number()? as usize,
            agent_max_queued: get("agent_max_queued")?.number()? as usize,
            jail: get("jail")?.boolean()?,
            jail_write: get("jail_write")?.paths()?,
            jail_show: get("jail_show")?.paths()?,
            jail_hide: get("jail_hide")?.paths()?,
            default_limits: Limits {
                memory_bytes: get("memory")?.optional()?.map(|r| r.bytes()).transpose()?,
                cpu_seconds: get("cpu_time")?
                    .optional()?
                    .map(|r| {
                        r.flag_duration()
                            .map(|d| d.as_millis().div_ceil(1000) as u64)
                    })
                    .transpose()?,
                max_files: get("max_files")?
                    .optional()?
                    .map(|r| r.number())
                    .transpose()?,
                max_procs: get("max_procs")?
                    .optional()?
                    .map(|r| r.number())
                    .transpose()?,
            },
            default_timeout: get("timeout")?
                .optional()?
                .map(|r| r.flag_duration())
                .transpose()?,
            cgroup: get("cgroup")?.boolean()?,
            max_connections: (get("max_connections")?.number()? as usize).max(1),
            agent_max_connections: (get("agent_max_connections")?.number()? as usize).max(1),
            tree_max_connections: (get("tree_max_connections")?.number()? as usize).max(1),
            env_allow: get("env_allow")?.names()?,
            salvage_max_file: get("salvage_max_file")?.bytes()?,
            // Halves smaller than 4 KiB would be mostly marker lines.
            log_max: get("log_max")?.bytes()?.max(8 << 10),
            commit_author: get("commit_author")?.commit_author()?,
            state_limits: StateLimits {
                max_write: get("state_max_write")?.bytes()?.max(1),
                max_session: get("state_max_session")?.bytes()?.max(1),
                checkpoint_keep: get("checkpoint_keep")?.number()?.max(1),
                tree_max_db: get("tree_max_db")?.bytes()?,
            },
            session_lifecycle: SessionLifecycle {
                idle_after: get("session_idle")?.duration()?,
                suspend_after: get("session_suspend")?.duration()?,
                archive_after: get("session_archive")?.duration()?,
                delete_after: get("session_delete")?.duration()?,
                gc_interval: get("session_gc_interval")?
                    .duration()?
                    .max(Duration::from_millis(10)),
                cache: (get("session_cache")?.number()? as usize).max(1),
            },
            metrics_listen: get("metrics_listen")?
                .optional()?
                .map(|r| r.address())
                .transpose()?,
            metrics: get("metrics")?.boolean()?,
            slo: SloConfig {
                checkpoint_save_p95: get("slo_checkpoint_save_p95")?.duration()?,
                restore_p95: get("slo_restore_p95")?.duration()?,
                start_ready_p99: get("slo_start_ready_p99")?.duration()?,
                cold_start_p99: get("slo_cold_start_p99")?.duration()?,
                session_state_p99: get("slo_session_state_p99")?.bytes()?,
                checkpoints_p99: get("slo_checkpoints_p99")?.number()?,
                cleanup_lag: get("slo_cleanup_lag")?.duration()?,
                schema_mismatches: get("slo_schema_mismatches")?.number()?,
                agents_lost: get("slo_agents_lost")?.number()?,
                window: get("slo_window")?.duration()?,
                check_interval: get("slo_check_interval")?
                    .duration()?
                    .max(Duration::from_millis(10)),
            },
            protocol_version: match crate::faults::test_var("GROVE_TEST_PROTOCOL_VERSION") {
                Some(v) => v.parse().unwrap_or(0),
                None => grove_proto::PROTOCOL_VERSION,
            },
            checkout_workers: cores,
            notify: layers.notify()?,
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
    /// The `[notify]` table, parsed.
    fn notify(&self) -> Result<Option<crate::notify::NotifyConfig>, ConfigError> {
        let Some((path, table)) = &self.file else {
            return Ok(None);
        };
        let Some(value) = table.get("notify") else {
            return Ok(None);
        };
        crate::notify::NotifyConfig::parse(value, &path.display().to_string())
            .map(Some)
            .map_err(|reason| ConfigError::File {
                path: path.clone(),
                reason,
            })
    }

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
            .find(|k| !SETTINGS.iter().any(|(key, _, _)| key == k) && !TABLES.contains(&k.as_str()))
        {
            return Err(ConfigError::File {
                path: path.into(),
                reason: format!(
                    "unknown setting `{unknown}`; known: {}",
                    SETTINGS
                        .iter()
                        .map(|(k, _, _)| *k)
                        .chain(TABLES.iter().copied())
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

    /// A socket address such as 127.0.0.1:9464.
    fn address(&self) -> Result<std::net::SocketAddr, ConfigError> {
        self.text
            .trim()
            .parse()
            .map_err(|_| self.invalid("expected an address and port, e.g. 127.0.0.1:9464"))
    }

    /// `None` for an unset value (empty, or "none").
    fn optional(self) -> Result<Option<Raw>, ConfigError> {
        let text = self.text.trim();
        Ok((!text.is_empty() && !text.eq_ignore_ascii_case("none")).then_some(self))
    }

    fn commit_author(&self) -> Result<CommitAuthor, ConfigError> {
        CommitAuthor::parse(self.text.trim()).ok_or_else(|| self.invalid("expected user or grove"))
    }

    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(true),
            "false" | "no" | "off" | "0" | "" => Ok(false),
            _ => Err(self.invalid("expected true or false")),
        }
    }

    /// "1048576", "512K", "256M", "2G".
    fn bytes(&self) -> Result<u64, ConfigError> {
        let text = self.text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let multiplier: u64 = match unit.trim().to_ascii_uppercase().as_str() {
            "" | "B" => 1,
            "K" | "KB" | "KIB" => 1 << 10,
            "M" | "MB" | "MIB" => 1 << 20,
            "G" | "GB" | "GIB" => 1 << 30,
            _ => return Err(self.invalid("expected a size such as 512M or 2G")),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(multiplier))
            .ok_or_else(|| self.invalid("expected a size such as 512M or 2G"))
    }

    /// A list of strings: a TOML array, or one string with `separators` between items.
    /// `what` names the items for the error.
    fn list(&self, what: &str, separators: &[char]) -> Result<Vec<String>, ConfigError> {
        let text = self.text.trim();
        if !text.starts_with('[') {
            return Ok(text
                .split(separators)
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_string)
                .collect());
        }
        let table: toml::Table = format!("list = {text}")
            .parse()
            .map_err(|_| self.invalid(&format!("expected a list of {what}")))?;
        table
            .get("list")
            .and_then(toml::Value::as_array)
            .and_then(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| self.invalid(&format!("expected a list of {what} (strings)")))
    }

    /// Absolute paths: a TOML array of strings, or one string with `:` between paths.
    fn paths(&self) -> Result<Vec<PathBuf>, ConfigError> {
        let paths: Vec<PathBuf> = self
            .list("paths", &[':'])?
            .into_iter()
            .map(PathBuf::from)
            .collect();
        if let Some(relative) = paths.iter().find(|p| !p.is_absolute()) {
            return Err(self.invalid(&format!("`{}` is not an absolute path", relative.display())));
        }
        Ok(paths)
    }

    /// Variable names: a TOML array of strings, or one string with commas or spaces
    /// between names.
    fn names(&self) -> Result<Vec<String>, ConfigError> {
        let names = self.list("variable names", &[',', ' '])?;
        if let Some(bad) = names
            .iter()
            .find(|n| n.is_empty() || n.contains(['=', '\0']))
        {
            return Err(self.invalid(&format!("`{bad}` is not a variable name")));
        }
        Ok(names)
    }

    /// Like the spawn flags `--timeout` and `--cpu-time`: "90s", "10m", or a bare number
    /// of seconds.
    fn flag_duration(&self) -> Result<Duration, ConfigError> {
        match self.text.trim().parse::<u64>() {
            Ok(secs) => Ok(Duration::from_secs(secs)),
            Err(_) => self.duration(),
        }
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

/// Who authors the commits grove makes for agents (the `commit_author` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAuthor {
    /// The user's `user.name` / `user.email`, grove when they have none.
    User,
    Grove,
}

impl CommitAuthor {
    pub fn parse(text: &str) -> Option<CommitAuthor> {
        match text {
            "user" => Some(CommitAuthor::User),
            "grove" => Some(CommitAuthor::Grove),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CommitAuthor::User => "user",
            CommitAuthor::Grove => "grove",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Raw {
        Raw {
            key: "test",
            text: text.into(),
            origin: "test".into(),
        }
    }

    #[test]
    fn agent_defaults_parse() {
        assert_eq!(raw("512M").bytes().ok(), Some(512 << 20));
        assert_eq!(raw("4096").bytes().ok(), Some(4096));
        assert!(raw("lots").bytes().is_err());
        assert_eq!(raw("yes").boolean().ok(), Some(true));
        assert_eq!(raw("0").boolean().ok(), Some(false));
        assert!(raw("maybe").boolean().is_err());
        assert_eq!(
            raw("90").flag_duration().ok(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            raw("2m").flag_duration().ok(),
            Some(Duration::from_secs(120))
        );
        assert!(matches!(raw("").optional(), Ok(None)));
        assert!(matches!(raw("none").optional(), Ok(None)));
        assert!(matches!(raw("1").optional(), Ok(Some(_))));
    }

    #[test]
    fn jail_write_takes_a_toml_list_or_a_colon_list_of_absolute_paths() {
        let expected = vec![PathBuf::from("/a"), PathBuf::from("/b c")];
        assert_eq!(
            raw(r#"["/a", "/b c"]"#).paths().ok(),
            Some(expected.clone())
        );
        assert_eq!(raw("/a:/b c").paths().ok(), Some(expected));
        assert_eq!(raw("").paths().ok(), Some(Vec::new()));
        assert!(raw("relative/path").paths().is_err());
        assert!(raw("[1, 2]").paths().is_err());
    }
}

//! The daemon's settings. Defaults suit users; tests shorten them through the environment.

use grove_proto::paths::{Dirs, PathError};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub dirs: Dirs,
    /// Time between SIGTERM and SIGKILL when an agent's tree is stopped.
    pub kill_grace: Duration,
    /// Protocol version this daemon speaks; only tests change it.
    pub protocol_version: u32,
    /// `checkout.workers` for `git worktree add`.
    pub checkout_workers: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Paths(#[from] PathError),
    #[error("{name}={value:?} is not a whole number")]
    NotANumber { name: &'static str, value: String },
}

fn env_number(name: &'static str) -> Result<Option<u64>, ConfigError> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::NotANumber { name, value }),
        Err(_) => Ok(None),
    }
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Config {
            dirs: Dirs::from_env()?,
            kill_grace: Duration::from_millis(env_number("GROVE_KILL_GRACE_MS")?.unwrap_or(5_000)),
            protocol_version: env_number("GROVE_TEST_PROTOCOL_VERSION")?
                .map_or(grove_proto::PROTOCOL_VERSION, |v| v as u32),
            checkout_workers: cores,
        })
    }
}

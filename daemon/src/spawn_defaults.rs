//! A spawn request completed from the daemon's settings: limits, timeout and jail the
//! request leaves out come from `config.toml` / `GROVE_*`, so that the agent's record
//! says what it really ran with.

use crate::config::Config;
use crate::error::Error;
use crate::supervisor::jail_paths;
use grove_proto::methods::SpawnParams;

/// Fills in the defaults and refuses a jail this kernel cannot enforce. Afterwards
/// `params.jail` is `Some`, and `params.jail_write` holds every extra writable path.
pub fn resolve(params: &mut SpawnParams, config: &Config) -> Result<(), Error> {
    let defaults = &config.default_limits;
    let limits = &mut params.limits;
    limits.max_files = limits.max_files.or(defaults.max_files);
    limits.memory_bytes = limits.memory_bytes.or(defaults.memory_bytes);
    limits.cpu_seconds = limits.cpu_seconds.or(defaults.cpu_seconds);
    limits.max_procs = limits.max_procs.or(defaults.max_procs);
    if limits.max_procs == Some(0) {
        return Err(Error::BadInput(
            "a limit of 0 processes would keep the agent from starting".into(),
        ));
    }
    if limits.max_procs.is_some() && !grove_sys::pids::available() {
        return Err(Error::Refused(format!(
            "{}; spawn without --max-procs (and unset the max_procs setting)",
            grove_sys::pids::why_unavailable()
        )));
    }
    if params.timeout_ms.is_none() {
        params.timeout_ms = config.default_timeout.map(|d| d.as_millis() as u64);
    }
    if limits.max_files == Some(0) {
        return Err(Error::BadInput(
            "a limit of 0 open files would keep the agent from starting".into(),
        ));
    }
    for entry in &params.jail_home {
        crate::presets::check_home_entry(entry).map_err(Error::BadInput)?;
    }
    for entry in &params.cli_files {
        crate::presets::check_cli_file(entry).map_err(Error::BadInput)?;
    }
    let jail = params.jail.unwrap_or(config.jail);
    params.jail = Some(jail);
    if let Some(relative) = params.jail_write.iter().find(|p| !p.is_absolute()) {
        return Err(Error::BadInput(format!(
            "jail path `{}` must be absolute",
            relative.display()
        )));
    }
    if !jail {
        if !params.jail_write.is_empty() {
            return Err(Error::BadInput(
                "--jail-write only means something with --jail".into(),
            ));
        }
        return Ok(());
    }
    jail_paths::check_kernel()?;
    jail_paths::check_cgroup()?;
    jail_paths::check_namespaces()?;
    let mut extra = config.jail_write.clone();
    extra.append(&mut params.jail_write);
    params.jail_write = extra;
    Ok(())
}

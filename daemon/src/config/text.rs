//! Each setting's value as one would write it in config.toml: what `grove config`
//! shows, and what `daemon.status` says the running daemon uses, so that the two can
//! be compared (a changed config.toml applies only at the next start).

use super::Config;
use std::collections::BTreeMap;
use std::time::Duration;

/// Every setting of [`super::SETTINGS`] with its value as text.
pub fn all(config: &Config) -> BTreeMap<String, String> {
    super::SETTINGS
        .iter()
        .map(|(key, _, _)| (key.to_string(), value_text(config, key)))
        .collect()
}

/// A setting's value as one would write it in config.toml.
pub fn value_text(config: &Config, key: &str) -> String {
    match key {
        "max_worktrees" => config.max_worktrees.to_string(),
        "pool_size" => config.pool_size.to_string(),
        "pool_idle" => duration(config.pool_idle),
        "repo_idle_release" => duration(config.repo_idle_release),
        "disk_high" => percent(config.disk_high),
        "disk_low" => percent(config.disk_low),
        "disk_check_interval" => duration(config.disk_check_interval),
        "prune_interval" => duration(config.prune_interval),
        "prune_first_delay" => duration(config.prune_first_delay),
        "max_idle" => duration(config.max_idle),
        "retention" => duration(config.retention),
        "kill_grace" => duration(config.kill_grace),
        "waiting_after" => duration(config.waiting_after),
        "attach_links" => config.attach_links.to_string(),
        "attach_title" => config.attach_title.to_string(),
        "max_depth" => config.max_depth.to_string(),
        "agent_max_children" => config.agent_max_children.to_string(),
        "agent_max_queued" => config.agent_max_queued.to_string(),
        "agent_max_connections" => config.agent_max_connections.to_string(),
        "tree_max_connections" => config.tree_max_connections.to_string(),
        "tree_max_db" => config.state_limits.tree_max_db.to_string(),
        "max_connections" => config.max_connections.to_string(),
        "salvage_max_file" => config.salvage_max_file.to_string(),
        "log_max" => config.log_max.to_string(),
        "commit_author" => config.commit_author.as_str().into(),
        "jail" => config.jail.to_string(),
        "jail_write" => list(config.jail_write.iter().map(|p| p.display().to_string())),
        "jail_show" => list(config.jail_show.iter().map(|p| p.display().to_string())),
        "jail_hide" => list(config.jail_hide.iter().map(|p| p.display().to_string())),
        "memory" => or_none(config.default_limits.memory_bytes),
        "cpu_time" => or_none(config.default_limits.cpu_seconds.map(|s| format!("{s}s"))),
        "max_files" => or_none(config.default_limits.max_files),
        "max_procs" => or_none(config.default_limits.max_procs),
        "timeout" => or_none(config.default_timeout.map(duration)),
        "cgroup" => config.cgroup.to_string(),
        "env_allow" => list(config.env_allow.iter().cloned()),
        "state_max_write" => config.state_limits.max_write.to_string(),
        "state_max_session" => config.state_limits.max_session.to_string(),
        "checkpoint_keep" => config.state_limits.checkpoint_keep.to_string(),
        "session_idle" => duration(config.session_lifecycle.idle_after),
        "session_suspend" => duration(config.session_lifecycle.suspend_after),
        "session_archive" => duration(config.session_lifecycle.archive_after),
        "session_delete" => duration(config.session_lifecycle.delete_after),
        "session_gc_interval" => duration(config.session_lifecycle.gc_interval),
        "session_cache" => config.session_lifecycle.cache.to_string(),
        "metrics_listen" => or_none(config.metrics_listen),
        "metrics" => config.metrics.to_string(),
        "slo_checkpoint_save_p95" => duration(config.slo.checkpoint_save_p95),
        "slo_restore_p95" => duration(config.slo.restore_p95),
        "slo_start_ready_p99" => duration(config.slo.start_ready_p99),
        "slo_session_state_p99" => config.slo.session_state_p99.to_string(),
        "slo_checkpoints_p99" => config.slo.checkpoints_p99.to_string(),
        "slo_cleanup_lag" => duration(config.slo.cleanup_lag),
        "slo_schema_mismatches" => config.slo.schema_mismatches.to_string(),
        "slo_agents_lost" => config.slo.agents_lost.to_string(),
        "slo_window" => duration(config.slo.window),
        "slo_check_interval" => duration(config.slo.check_interval),
        _ => "(unknown setting)".into(),
    }
}

/// An unset limit: nothing is set, and the table says so instead of leaving a hole.
fn or_none(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "none".into(), |v| v.to_string())
}

fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(",")
    }
}

fn percent(fraction: f64) -> String {
    let value = fraction * 100.0;
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// "500ms", "5s", "5m", "24h", "30days": the largest unit that divides evenly.
fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    if secs.is_multiple_of(86_400) && secs >= 2 * 86_400 {
        format!("{}days", secs / 86_400)
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) && secs >= 120 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_config_toml_takes_them() {
        assert_eq!(duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(duration(Duration::from_secs(30 * 86_400)), "30days");
        assert_eq!(duration(Duration::from_secs(300)), "5m");
        assert_eq!(duration(Duration::from_secs(60)), "60s");
        assert_eq!(duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(percent(0.8), "80");
        assert_eq!(percent(0.125), "12.5");
    }
}

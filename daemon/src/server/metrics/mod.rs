//! The metrics as the daemon tells them, its service levels and the Prometheus endpoint.
//!
//! Hooks at their call sites record into the process-wide `crate::metrics::record`; gauges
//! are read from the core, the state service and the disk when asked. Both `daemon.metrics`
//! and `GET /metrics` are built from one [`gather`], so they always agree.

pub mod http;
pub mod slo;

use crate::metrics::record::{self, Counter, Histogram};
use crate::server::Ctx;
use grove_proto::methods::{HistogramValue, Metric, Series};
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn metric(name: &str, kind: &str, help: &str, series: Vec<Series>) -> Metric {
    Metric {
        name: name.into(),
        kind: kind.into(),
        help: help.into(),
        series,
    }
}

fn plain(value: f64) -> Vec<Series> {
    vec![labelled(&[], value)]
}

fn labelled(labels: &[(&str, &str)], value: f64) -> Series {
    Series {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        value,
        histogram: None,
    }
}

fn counter(name: &str, help: &str, c: &Counter) -> Metric {
    metric(name, "counter", help, plain(c.get() as f64))
}

fn histogram_series(labels: &[(&str, &str)], h: &Histogram) -> Series {
    let (cumulative, sum) = h.read();
    let count = cumulative.last().copied().unwrap_or(0);
    let buckets = h
        .bounds
        .iter()
        .map(|b| Some(*b))
        .chain([None])
        .zip(cumulative)
        .collect();
    Series {
        histogram: Some(HistogramValue { sum, buckets }),
        ..labelled(labels, count as f64)
    }
}

fn histogram(name: &str, help: &str, h: &Histogram) -> Metric {
    metric(name, "histogram", help, vec![histogram_series(&[], h)])
}

/// Per-session figures the state service knows: (state bytes, checkpoints) each.
pub async fn sessions(ctx: &Ctx) -> Vec<(u64, u64)> {
    ctx.state
        .list()
        .await
        .unwrap_or_default()
        .iter()
        .map(|s| (s.state_bytes, s.checkpoints))
        .collect()
}

/// Sessions shown one by one (the largest by state): a label per session of 100,000
/// would swamp any scraper.
pub const SESSIONS_SHOWN: usize = 50;

/// Session count by lifecycle state, and state bytes and checkpoints of the largest
/// sessions, each labelled with its name.
fn session_metrics(sessions: &mut [grove_proto::state::SessionInfo]) -> Vec<Metric> {
    let mut by_lifecycle: BTreeMap<String, u64> = BTreeMap::new();
    for s in sessions.iter() {
        *by_lifecycle.entry(s.lifecycle.clone()).or_default() += 1;
    }
    sessions.sort_by(|a, b| {
        (b.state_bytes, b.checkpoints, &a.name).cmp(&(a.state_bytes, a.checkpoints, &b.name))
    });
    let shown = &sessions[..sessions.len().min(SESSIONS_SHOWN)];
    let each = |value: fn(&grove_proto::state::SessionInfo) -> u64| {
        shown
            .iter()
            .map(|s| labelled(&[("session", &s.name)], value(s) as f64))
            .collect()
    };
    vec![
        metric(
            "grove_sessions_by_lifecycle",
            "gauge",
            "Sessions by lifecycle state (active, idle, suspended, archived).",
            by_lifecycle
                .iter()
                .map(|(state, n)| labelled(&[("lifecycle", state)], *n as f64))
                .collect(),
        ),
        metric(
            "grove_session_state_bytes",
            "gauge",
            "State size (JSON bytes) per session, for the 50 largest.",
            each(|s| s.state_bytes),
        ),
        metric(
            "grove_session_checkpoints",
            "gauge",
            "Checkpoints held per session, for the 50 largest.",
            each(|s| s.checkpoints),
        ),
    ]
}

/// Every metric as it stands now.
pub async fn gather(ctx: &Ctx) -> Vec<Metric> {
    let m = record::get();
    let mut out = vec![
        metric(
            "grove_spawn_seconds",
            "histogram",
            "Time from a spawn request to the agent running.",
            vec![
                histogram_series(&[("pooled", "true")], &m.spawn_pooled),
                histogram_series(&[("pooled", "false")], &m.spawn_fresh),
            ],
        ),
        histogram(
            "grove_queue_wait_seconds",
            "Time queued agents waited for a slot.",
            &m.queue_wait,
        ),
        histogram(
            "grove_checkpoint_save_seconds",
            "Time from a state update to its checkpoint being durable.",
            &m.checkpoint_save,
        ),
        histogram(
            "grove_restore_seconds",
            "Time to read the state at a checkpoint (state.get with at).",
            &m.restore,
        ),
        histogram(
            "grove_start_ready_seconds",
            "Time from daemon start to accepting connections.",
            &m.start_ready,
        ),
        histogram(
            "grove_session_cold_start_seconds",
            "Time to bring back a session that was not in memory, for the request that needed it.",
            &m.session_cold_start,
        ),
        counter(
            "grove_pool_hits_total",
            "Spawns that took a warm-pool worktree.",
            &m.pool_hits,
        ),
        counter(
            "grove_pool_misses_total",
            "Spawns that checked out a worktree of their own.",
            &m.pool_misses,
        ),
        counter("grove_collects_total", "Agents collected.", &m.collects),
        counter(
            "grove_salvages_total",
            "Collects that salvaged uncommitted work.",
            &m.salvages,
        ),
        counter(
            "grove_salvage_failures_total",
            "Collects that failed (the worktree was kept).",
            &m.collect_failures,
        ),
        counter(
            "grove_agents_lost_total",
            "Agents whose process vanished without an exit record.",
            &m.agents_lost,
        ),
        counter(
            "grove_agents_adopted_total",
            "Running agents adopted by this daemon after a restart.",
            &m.agents_adopted,
        ),
        counter(
            "grove_state_updates_total",
            "state.update requests answered.",
            &m.state_updates,
        ),
        counter(
            "grove_schema_refusals_total",
            "Requests refused because a session has a newer schema version.",
            &m.schema_refusals,
        ),
        counter(
            "grove_prune_passes_total",
            "Prune passes run by the janitor.",
            &m.prune_passes,
        ),
        counter(
            "grove_connections_turned_away_total",
            "Connections turned away at a cap (max_connections, the user's reserve, \
             agent_max_connections) with nothing of them read.",
            &m.connections_turned_away,
        ),
        counter(
            "grove_connections_refused_tree_total",
            "Agents' connections refused because their tree held tree_max_connections.",
            &m.connections_refused_tree,
        ),
        counter(
            "grove_tree_db_refused_total",
            "Agents' writes refused because their tree held tree_max_db of grove.db.",
            &m.tree_db_refusals,
        ),
        counter(
            "grove_connections_silent_total",
            "Connections closed for sending no hello in time.",
            &m.connections_silent,
        ),
        metric(
            "grove_daemon_restarts_total",
            "counter",
            "Daemon starts on this state dir after the first, by how the daemon before ended \
             (stopped: a clean stop; crashed: it never recorded one).",
            vec![
                labelled(
                    &[("previous", "stopped")],
                    m.restarts_after_stop.get() as f64,
                ),
                labelled(
                    &[("previous", "crashed")],
                    m.restarts_after_crash.get() as f64,
                ),
            ],
        ),
    ];
    let stamps = [
        (
            "grove_daemon_start_time_seconds",
            "When this daemon became ready (seconds since the epoch).",
            m.started_at.get(),
        ),
        (
            "grove_last_prune_time_seconds",
            "When the last prune pass ran (seconds since the epoch).",
            m.last_prune.get(),
        ),
        (
            "grove_next_prune_time_seconds",
            "When the next prune pass is due (seconds since the epoch).",
            m.next_prune.get(),
        ),
        (
            "grove_last_session_gc_time_seconds",
            "When the last session garbage collection ran (seconds since the epoch).",
            m.last_session_gc.get(),
        ),
    ];
    for (name, help, at) in stamps {
        if let Some(ms) = at {
            out.push(metric(name, "gauge", help, plain(ms as f64 / 1000.0)));
        }
    }
    out.extend(gauges(ctx).await);
    out.extend(slo_metrics(&slo::evaluate(ctx).await));
    out
}

/// The service levels as series, so that Prometheus can alert on them (the rules in
/// examples/prometheus/): each one's value (when measured), objective and verdict.
fn slo_metrics(slos: &[grove_proto::methods::SloStatus]) -> Vec<Metric> {
    let by_slo = |value: &dyn Fn(&grove_proto::methods::SloStatus) -> Option<f64>| {
        slos.iter()
            .filter_map(|s| Some(labelled(&[("slo", &s.name), ("unit", &s.unit)], value(s)?)))
            .collect()
    };
    vec![
        metric(
            "grove_slo_value",
            "gauge",
            "Each service level's measured value, in its unit (none before it is measured).",
            by_slo(&|s| s.value),
        ),
        metric(
            "grove_slo_objective",
            "gauge",
            "Each service level's threshold (settings slo_*), in its unit.",
            by_slo(&|s| Some(s.threshold)),
        ),
        metric(
            "grove_slo_breached",
            "gauge",
            "1 while a service level is breached, else 0.",
            by_slo(&|s| Some(f64::from(u8::from(s.breached)))),
        ),
    ]
}

/// Read now from the daemon's parts.
async fn gauges(ctx: &Ctx) -> Vec<Metric> {
    // Counted in the core: a copy of every record per scrape grew with history.
    let by_status: BTreeMap<&'static str, u64> =
        ctx.core.count_by_status().await.unwrap_or_default();
    let queued = ctx.core.queue().await.map(|q| q.len()).unwrap_or(0);
    // Directories on disk, not records (a collected agent's record outlives its
    // worktree): one listing of the root, off the runtime's workers.
    let root = ctx.config.dirs.worktree_root.clone();
    let worktrees = tokio::task::spawn_blocking(move || {
        crate::worktree_root::worktree_dirs(&root)
            .iter()
            .filter(|dir| !crate::git::pool::is_pool_dir(dir))
            .count()
    })
    .await
    .unwrap_or(0);
    let pool = ctx.core.status().await.pool;
    let mut listed = ctx.state.list().await.unwrap_or_default();
    let sessions: Vec<(u64, u64)> = listed
        .iter()
        .map(|s| (s.state_bytes, s.checkpoints))
        .collect();
    let disk = crate::worktree_root::measure(&ctx.config.dirs.worktree_root).ok();
    let mut out = vec![
        metric(
            "grove_agents",
            "gauge",
            "Agents the daemon knows, by status.",
            by_status
                .iter()
                .map(|(status, n)| labelled(&[("status", status)], *n as f64))
                .collect(),
        ),
        metric(
            "grove_queue_depth",
            "gauge",
            "Agents waiting for a slot.",
            plain(queued as f64),
        ),
        metric(
            "grove_worktrees",
            "gauge",
            "Agents' worktrees on disk (kept ones and unknown ones included; the warm \
             pool is grove_pool_worktrees).",
            plain(worktrees as f64),
        ),
        metric(
            "grove_pool_worktrees",
            "gauge",
            "Warm-pool worktrees.",
            plain(pool.len() as f64),
        ),
        metric(
            "grove_connections",
            "gauge",
            "Client connections open now.",
            plain(ctx.connections.open() as f64),
        ),
        metric(
            "grove_sessions",
            "gauge",
            "Sessions.",
            plain(sessions.len() as f64),
        ),
        metric(
            "grove_session_state_bytes_max",
            "gauge",
            "Largest session state (JSON bytes).",
            plain(sessions.iter().map(|s| s.0).max().unwrap_or(0) as f64),
        ),
        metric(
            "grove_session_checkpoints_max",
            "gauge",
            "Most checkpoints held by one session.",
            plain(sessions.iter().map(|s| s.1).max().unwrap_or(0) as f64),
        ),
    ];
    out.extend(session_metrics(&mut listed));
    if let Some(disk) = disk {
        out.push(metric(
            "grove_disk_used_ratio",
            "gauge",
            "Used fraction of the worktree root's filesystem.",
            plain(disk.used),
        ));
        out.push(metric(
            "grove_disk_threshold_ratio",
            "gauge",
            "disk_high (cleanup starts) and disk_low (cleanup aims under).",
            vec![
                labelled(&[("level", "high")], ctx.config.disk_high),
                labelled(&[("level", "low")], ctx.config.disk_low),
            ],
        ));
    }
    out
}

/// The Prometheus text format (version 0.0.4).
pub fn exposition(metrics: &[Metric]) -> String {
    let mut text = String::new();
    for m in metrics {
        let _ = writeln!(text, "# HELP {} {}", m.name, m.help);
        let _ = writeln!(text, "# TYPE {} {}", m.name, m.kind);
        for s in &m.series {
            match &s.histogram {
                Some(h) => {
                    for (bound, count) in &h.buckets {
                        let le = bound.map_or("+Inf".to_string(), |b| b.to_string());
                        let labels = label_text(&s.labels, Some(&le));
                        let _ = writeln!(text, "{}_bucket{labels} {count}", m.name);
                    }
                    let labels = label_text(&s.labels, None);
                    let _ = writeln!(text, "{}_sum{labels} {}", m.name, h.sum);
                    let _ = writeln!(text, "{}_count{labels} {}", m.name, s.value);
                }
                None => {
                    let labels = label_text(&s.labels, None);
                    let _ = writeln!(text, "{}{labels} {}", m.name, s.value);
                }
            }
        }
    }
    text
}

fn label_text(labels: &[(String, String)], le: Option<&str>) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(le.map(|le| ("le", le)))
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

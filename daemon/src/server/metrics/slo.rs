//! The built-in service levels: each is measured, compared with its objective (settings
//! `slo_*`), and a change either way is an event (`slo.breached`, `slo.recovered`) and a
//! line in the daemon log.

use crate::metrics::record::{self, Recent};
use crate::server::Ctx;
use grove_proto::methods::SloStatus;
use grove_proto::now_ms;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The `q` quantile (nearest rank) of `values`, None when there are none.
fn quantile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

fn latency(
    name: &str,
    what: &str,
    q: f64,
    recent: &Recent,
    since: u64,
    limit: Duration,
) -> SloStatus {
    let threshold = limit.as_secs_f64();
    let value = quantile(recent.since(since), q);
    SloStatus {
        name: name.into(),
        objective: format!(
            "{what} p{} < {}",
            (q * 100.0).round(),
            humantime::format_duration(limit)
        ),
        value,
        threshold,
        unit: "s".into(),
        breached: value.is_some_and(|v| v >= threshold),
    }
}

fn at_most(name: &str, objective: String, value: f64, threshold: f64, unit: &str) -> SloStatus {
    SloStatus {
        name: name.into(),
        objective,
        value: Some(value),
        threshold,
        unit: unit.into(),
        breached: value > threshold,
    }
}

/// At most `limit` events of `what` in the window.
fn per_window(name: &str, what: &str, recent: &Recent, since: u64, limit: u64) -> SloStatus {
    at_most(
        name,
        format!("{what} <= {limit} per window"),
        recent.since(since).len() as f64,
        limit as f64,
        "count",
    )
}

fn below(
    name: &str,
    objective: String,
    value: Option<f64>,
    threshold: f64,
    unit: &str,
) -> SloStatus {
    SloStatus {
        name: name.into(),
        objective,
        value,
        threshold,
        unit: unit.into(),
        breached: value.is_some_and(|v| v >= threshold),
    }
}

/// Every service level as it stands now.
pub async fn evaluate(ctx: &Ctx) -> Vec<SloStatus> {
    let slo = &ctx.config.slo;
    let m = record::get();
    let since = now_ms().saturating_sub(slo.window.as_millis() as u64);
    let sessions = super::sessions(ctx).await;
    let bytes = quantile(sessions.iter().map(|s| s.0 as f64).collect(), 0.99);
    let checkpoints = quantile(sessions.iter().map(|s| s.1 as f64).collect(), 0.99);
    // Of every collector: the pass due now and not yet run, or one in the window that
    // started late.
    let lag = [
        (&m.next_prune, &m.prune_lateness),
        (&m.next_session_gc, &m.session_gc_lateness),
    ]
    .into_iter()
    .map(|(next, lateness)| {
        let overdue = next
            .get()
            .map_or(0.0, |due| now_ms().saturating_sub(due) as f64 / 1000.0);
        lateness.since(since).into_iter().fold(overdue, f64::max)
    })
    .fold(0.0, f64::max);
    vec![
        latency(
            "checkpoint_save_p95",
            "checkpoint save",
            0.95,
            &m.checkpoint_save.recent,
            since,
            slo.checkpoint_save_p95,
        ),
        latency(
            "restore_p95",
            "restore",
            0.95,
            &m.restore.recent,
            since,
            slo.restore_p95,
        ),
        latency(
            "start_ready_p99",
            "daemon start to ready",
            0.99,
            &m.start_ready.recent,
            since,
            slo.start_ready_p99,
        ),
        latency(
            "cold_start_p99",
            "session cold start",
            0.99,
            &m.session_cold_start.recent,
            since,
            slo.cold_start_p99,
        ),
        below(
            "session_state_p99",
            format!("session state p99 < {} bytes", slo.session_state_p99),
            bytes,
            slo.session_state_p99 as f64,
            "bytes",
        ),
        below(
            "checkpoints_p99",
            format!("checkpoints per session p99 < {}", slo.checkpoints_p99),
            checkpoints,
            slo.checkpoints_p99 as f64,
            "count",
        ),
        at_most(
            "cleanup_lag",
            format!(
                "cleanup lag (prune, session GC) <= {}",
                humantime::format_duration(slo.cleanup_lag)
            ),
            lag,
            slo.cleanup_lag.as_secs_f64(),
            "s",
        ),
        per_window(
            "schema_mismatches",
            "schema mismatches",
            &m.schema_refusals.recent,
            since,
            slo.schema_mismatches,
        ),
        per_window(
            "agents_lost",
            "agents lost",
            &m.agents_lost.recent,
            since,
            slo.agents_lost,
        ),
    ]
}

/// Checks the service levels every `slo_check_interval` until the daemon stops.
pub fn start(ctx: Arc<Ctx>) {
    let mut stop = ctx.stop.subscribe();
    let window_ms = ctx.config.slo.window.as_millis() as u64;
    let state_dir = ctx.config.dirs.state_dir.clone();
    crate::metrics::window::load(&state_dir, window_ms);
    tokio::spawn(async move {
        let mut breached: HashSet<String> = HashSet::new();
        // The first check waits one interval: what start-up found (lost agents) is
        // announced to subscribers that had time to subscribe.
        let every = ctx.config.slo.check_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
            for status in evaluate(&ctx).await {
                announce(&ctx, &mut breached, status);
            }
            // Also written at the stop (`instance.rs`); this covers a crash.
            crate::metrics::window::keep(&state_dir, window_ms);
        }
    });
}

fn announce(ctx: &Ctx, breached: &mut HashSet<String>, status: SloStatus) {
    let was = breached.contains(&status.name);
    let value = status.value.map_or("none".to_string(), |v| format!("{v}"));
    if status.breached && !was {
        tracing::warn!(slo = %status.name, value = %value, unit = %status.unit, "service level breached: {}", status.objective);
        ctx.events.publish("slo.breached", &status, None, None);
        breached.insert(status.name);
    } else if !status.breached && was {
        tracing::info!(slo = %status.name, value = %value, unit = %status.unit, "service level recovered: {}", status.objective);
        ctx.events.publish("slo.recovered", &status, None, None);
        breached.remove(&status.name);
    }
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_are_nearest_rank() {
        assert_eq!(quantile(Vec::new(), 0.95), None);
        assert_eq!(quantile(vec![5.0], 0.99), Some(5.0));
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(values.clone(), 0.95), Some(95.0));
        assert_eq!(quantile(values, 0.99), Some(99.0));
    }
}

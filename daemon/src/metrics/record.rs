//! What the daemon records as it runs: counters and latency histograms, process-wide,
//! so that a hook at a call site is one line. Gauges (agents by status, sessions, disk)
//! are read when someone asks (see `gather`), not recorded.

use grove_proto::now_ms;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::Instant;

/// Samples kept for the service levels' windows: enough for a percentile, bounded so that
/// a busy daemon's memory stays flat.
const RECENT: usize = 4096;

/// Latency buckets in seconds: 1 ms to 10 s.
pub const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Recent (time, value) pairs, for percentiles and counts over the service-level window:
/// a ring of atomics, so that recording on every state update takes no lock (a mutex here,
/// contended by the runtime's threads, cost the updates several percent).
#[derive(Default)]
pub struct Recent {
    next: AtomicUsize,
    /// Made at the first sample: most counters never take one, and 19 rings made up
    /// front were 1.2 MiB of a fresh daemon's 2.3.
    ring: OnceLock<Ring>,
}

/// When (ms since the epoch; 0: empty) and what (f64 bits), slot by slot. A reader
/// racing a writer may pair one sample's time with another's value, which a window's
/// percentile does not notice.
struct Ring {
    at: Box<[AtomicU64]>,
    values: Box<[AtomicU64]>,
}

impl Ring {
    fn new() -> Ring {
        let slots = || (0..RECENT).map(|_| AtomicU64::new(0)).collect();
        Ring {
            at: slots(),
            values: slots(),
        }
    }
}

impl Recent {
    fn push(&self, value: f64) {
        self.push_at(now_ms().max(1), value);
    }

    /// A sample recorded at `at_ms`: a previous daemon's, read back at start.
    pub fn push_at(&self, at_ms: u64, value: f64) {
        let ring = self.ring.get_or_init(Ring::new);
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % RECENT;
        ring.values[slot].store(value.to_bits(), Ordering::Relaxed);
        ring.at[slot].store(at_ms.max(1), Ordering::Release);
    }

    /// Values recorded at or after `since_ms`.
    pub fn since(&self, since_ms: u64) -> Vec<f64> {
        self.samples_since(since_ms)
            .into_iter()
            .map(|(_, value)| value)
            .collect()
    }

    /// (when, value) of the samples recorded at or after `since_ms`, oldest first.
    pub fn samples_since(&self, since_ms: u64) -> Vec<(u64, f64)> {
        let Some(ring) = self.ring.get() else {
            return Vec::new();
        };
        let mut samples: Vec<(u64, f64)> = ring
            .at
            .iter()
            .zip(ring.values.iter())
            .map(|(at, value)| {
                let at = at.load(Ordering::Acquire);
                (at, f64::from_bits(value.load(Ordering::Relaxed)))
            })
            .filter(|(at, _)| *at != 0 && *at >= since_ms)
            .collect();
        samples.sort_by_key(|(at, _)| *at);
        samples
    }
}

pub struct Histogram {
    pub bounds: &'static [f64],
    /// Per bucket (not cumulative); the last one is +Inf.
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    pub recent: Recent,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            recent: Recent::default(),
        }
    }

    pub fn observe(&self, seconds: f64) {
        if !enabled() {
            return;
        }
        let bucket = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
        self.recent.push(seconds);
    }

    pub fn since(&self, start: Instant) {
        self.observe(start.elapsed().as_secs_f64());
    }

    /// Cumulative counts per bound (+Inf last), and the sum in seconds.
    pub fn read(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                total += c.load(Ordering::Relaxed);
                total
            })
            .collect();
        (
            cumulative,
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }
}

#[derive(Default)]
pub struct Counter {
    total: AtomicU64,
    pub recent: Recent,
}

impl Counter {
    pub fn inc(&self) {
        if enabled() {
            self.total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Also remembers when, for a service level counted over a window.
    pub fn inc_timed(&self) {
        if enabled() {
            self.total.fetch_add(1, Ordering::Relaxed);
            self.recent.push(1.0);
        }
    }

    pub fn get(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// For a count kept elsewhere (the database) and read once.
    fn set(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }
}

/// A time in ms since the epoch, 0 for never.
#[derive(Default)]
pub struct Stamp(AtomicU64);

impl Stamp {
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }
}

pub struct Metrics {
    pub spawn_pooled: Histogram,
    pub spawn_fresh: Histogram,
    pub queue_wait: Histogram,
    pub checkpoint_save: Histogram,
    pub restore: Histogram,
    pub start_ready: Histogram,
    /// How long bringing back a session that was not in memory took (its first answer
    /// after it was suspended, archived or evicted).
    pub session_cold_start: Histogram,
    pub pool_hits: Counter,
    pub pool_misses: Counter,
    pub collects: Counter,
    pub collect_failures: Counter,
    pub salvages: Counter,
    pub agents_lost: Counter,
    pub agents_adopted: Counter,
    pub state_updates: Counter,
    pub schema_refusals: Counter,
    pub prune_passes: Counter,
    pub connections_turned_away: Counter,
    pub connections_refused_tree: Counter,
    pub tree_db_refusals: Counter,
    pub connections_silent: Counter,
    /// Daemon starts on this database after a clean stop, and after one that never
    /// recorded its stop.
    pub restarts_after_stop: Counter,
    pub restarts_after_crash: Counter,
    /// How late each prune pass started after it was due, in seconds.
    pub prune_lateness: Recent,
    /// Likewise each pass of the sessions' lifecycle GC.
    pub session_gc_lateness: Recent,
    pub last_prune: Stamp,
    pub next_prune: Stamp,
    pub last_session_gc: Stamp,
    pub next_session_gc: Stamp,
    pub started_at: Stamp,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    spawn_pooled: Histogram::new(SECONDS),
    spawn_fresh: Histogram::new(SECONDS),
    queue_wait: Histogram::new(SECONDS),
    checkpoint_save: Histogram::new(SECONDS),
    restore: Histogram::new(SECONDS),
    start_ready: Histogram::new(SECONDS),
    session_cold_start: Histogram::new(SECONDS),
    pool_hits: Counter::default(),
    pool_misses: Counter::default(),
    collects: Counter::default(),
    collect_failures: Counter::default(),
    salvages: Counter::default(),
    agents_lost: Counter::default(),
    agents_adopted: Counter::default(),
    state_updates: Counter::default(),
    schema_refusals: Counter::default(),
    prune_passes: Counter::default(),
    connections_turned_away: Counter::default(),
    connections_refused_tree: Counter::default(),
    tree_db_refusals: Counter::default(),
    connections_silent: Counter::default(),
    restarts_after_stop: Counter::default(),
    restarts_after_crash: Counter::default(),
    prune_lateness: Recent::default(),
    session_gc_lateness: Recent::default(),
    last_prune: Stamp::default(),
    next_prune: Stamp::default(),
    last_session_gc: Stamp::default(),
    next_session_gc: Stamp::default(),
    started_at: Stamp::default(),
});

/// Off with `metrics = false`: the hooks then cost one relaxed load.
static ENABLED: AtomicBool = AtomicBool::new(true);

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn get() -> &'static Metrics {
    &METRICS
}

// The hooks, one call each at their call sites.

/// An agent runs: `created_at_ms` is when it was asked for.
pub fn agent_running(created_at_ms: u64, pooled: bool) {
    let seconds = now_ms().saturating_sub(created_at_ms) as f64 / 1000.0;
    let m = get();
    if pooled {
        m.pool_hits.inc();
        m.spawn_pooled.observe(seconds);
    } else {
        m.pool_misses.inc();
        m.spawn_fresh.observe(seconds);
    }
}

pub fn left_queue(created_at_ms: u64) {
    get()
        .queue_wait
        .observe(now_ms().saturating_sub(created_at_ms) as f64 / 1000.0);
}

pub fn collected<T, E>(result: &Result<T, E>, salvaged: impl FnOnce(&T) -> bool) {
    let m = get();
    match result {
        Ok(done) => {
            m.collects.inc();
            if salvaged(done) {
                m.salvages.inc();
            }
        }
        Err(_) => m.collect_failures.inc(),
    }
}

pub fn agent_lost() {
    get().agents_lost.inc_timed();
}

/// A connection was turned away at a cap (`-32012`), nothing of it read.
pub fn connection_turned_away() {
    get().connections_turned_away.inc();
}

/// An agent's connection was refused at its tree's budget (`-32014`).
pub fn connection_refused_tree() {
    get().connections_refused_tree.inc();
}

/// An agent's write was refused at its tree's share of grove.db (`-32015`).
pub fn tree_db_refused() {
    get().tree_db_refusals.inc();
}

/// A connection was closed for saying nothing before `hello`.
pub fn connection_silent() {
    get().connections_silent.inc();
}

pub fn agent_adopted() {
    get().agents_adopted.inc();
}

/// A state update came back durable (or failed) after `start`.
pub fn checkpoint_saved(start: Instant) {
    let m = get();
    m.state_updates.inc();
    m.checkpoint_save.since(start);
}

pub fn restored(start: Instant) {
    get().restore.since(start);
}

/// Counts a refusal for a newer schema version and passes the error on.
pub fn schema_refusal<E>(error: E) -> E {
    get().schema_refusals.inc_timed();
    error
}

/// A prune pass that began at `started_ms` is done; the next is due at `next_ms`.
pub fn prune_ran(started_ms: u64, next_ms: u64) {
    let m = get();
    m.prune_passes.inc();
    if let Some(due) = m.next_prune.get() {
        m.prune_lateness
            .push(started_ms.saturating_sub(due) as f64 / 1000.0);
    }
    m.last_prune.set(now_ms());
    m.next_prune.set(next_ms);
}

pub fn prune_due(at_ms: u64) {
    get().next_prune.set(at_ms);
}

/// A pass of the sessions' lifecycle GC that began at `started_ms` is done; the next is
/// due at `next_ms`.
pub fn session_gc_ran(started_ms: u64, next_ms: u64) {
    let m = get();
    if let Some(due) = m.next_session_gc.get() {
        m.session_gc_lateness
            .push(started_ms.saturating_sub(due) as f64 / 1000.0);
    }
    m.last_session_gc.set(now_ms());
    m.next_session_gc.set(next_ms);
}

pub fn session_gc_due(at_ms: u64) {
    get().next_session_gc.set(at_ms);
}

/// A session that was not in memory was brought back for a request, from `start`.
pub fn session_cold_start(start: Instant) {
    get().session_cold_start.since(start);
}

/// The restarts the database counted when this daemon started.
pub fn daemon_started(starts: crate::db::starts::Starts) {
    let m = get();
    m.restarts_after_stop.set(starts.after_stop);
    m.restarts_after_crash.set(starts.after_crash);
}

pub fn daemon_ready(start: Instant) {
    let m = get();
    m.started_at.set(now_ms());
    m.start_ready.since(start);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_are_cumulative_and_end_with_inf() {
        let h = Histogram::new(SECONDS);
        for s in [0.0005, 0.003, 0.003, 20.0] {
            h.observe(s);
        }
        let (cumulative, sum) = h.read();
        assert_eq!(cumulative.len(), SECONDS.len() + 1);
        assert_eq!(cumulative[0], 1);
        assert_eq!(cumulative[2], 3);
        assert_eq!(cumulative[SECONDS.len() - 1], 3);
        assert_eq!(cumulative[SECONDS.len()], 4);
        assert!((sum - 20.0065).abs() < 1e-3, "{sum}");
        assert_eq!(h.recent.since(0).len(), 4);
    }

    /// What one state update's hook costs (run with --ignored --nocapture).
    #[test]
    #[ignore]
    fn hook_cost() {
        let n = 200_000;
        let start = Instant::now();
        for _ in 0..n {
            checkpoint_saved(Instant::now());
        }
        let per = start.elapsed().as_nanos() / n;
        println!("checkpoint_saved: {per} ns per update");
    }
}

//! The service levels' window outlives a restart: the samples it is taken over are
//! written to `slo-window.json` in the state directory at every check and at the stop,
//! and those still inside the window are read back at the next start. Without it every
//! restart began with an empty window, and a breach ended by restarting the daemon.

use super::record::{self, Metrics, Recent};
use grove_proto::now_ms;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FILE: &str = "slo-window.json";

/// The rings a service level is taken over, by the name they are stored under.
fn rings(m: &Metrics) -> [(&'static str, &Recent); 8] {
    [
        ("checkpoint_save", &m.checkpoint_save.recent),
        ("restore", &m.restore.recent),
        ("start_ready", &m.start_ready.recent),
        ("session_cold_start", &m.session_cold_start.recent),
        ("prune_lateness", &m.prune_lateness),
        ("session_gc_lateness", &m.session_gc_lateness),
        ("schema_refusals", &m.schema_refusals.recent),
        ("agents_lost", &m.agents_lost.recent),
    ]
}

#[derive(Serialize, Deserialize, Default)]
struct Stored {
    /// Per ring, (ms since the epoch, value) oldest first.
    rings: BTreeMap<String, Vec<(u64, f64)>>,
}

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Writes the samples of the last `window_ms` for the next start; a failure is logged
/// (the window then starts from the last file written).
pub fn keep(state_dir: &Path, window_ms: u64) {
    if let Err(e) = save(state_dir, window_ms) {
        tracing::warn!(error = %e, "cannot keep the service levels' window for the next start");
    }
}

/// Writes the samples of the last `window_ms` (atomically: a crash leaves the previous
/// file or this one, never half of one).
fn save(state_dir: &Path, window_ms: u64) -> std::io::Result<()> {
    let since = now_ms().saturating_sub(window_ms);
    let stored = Stored {
        rings: rings(record::get())
            .into_iter()
            .map(|(name, ring)| (name.to_string(), ring.samples_since(since)))
            .filter(|(_, samples)| !samples.is_empty())
            .collect(),
    };
    let text = serde_json::to_vec(&stored)?;
    let file = path(state_dir);
    let temporary = file.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &file)
}

/// Reads back a previous daemon's samples of the last `window_ms`; a missing file is an
/// empty window, an unreadable one is said in the log and left to be replaced.
pub fn load(state_dir: &Path, window_ms: u64) {
    let file = path(state_dir);
    let text = match std::fs::read(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(path = %file.display(), error = %e, "cannot read the service levels' window; it starts empty");
            return;
        }
    };
    let stored: Stored = match serde_json::from_slice(&text) {
        Ok(stored) => stored,
        Err(e) => {
            tracing::warn!(path = %file.display(), error = %e, "the service levels' window file is unreadable; it starts empty");
            return;
        }
    };
    let since = now_ms().saturating_sub(window_ms);
    for (name, ring) in rings(record::get()) {
        let samples = stored
            .rings
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (at, value) in samples.iter().filter(|(at, _)| *at >= since) {
            ring.push_at(*at, *value);
        }
    }
}

//! Case 10: 20 queued agents released one by one (a cap of one worktree), and the
//! latency of `grove --json list` while the core works through the queue. Each release
//! used to re-save every queued record, one fsync each, on the core's turn.

use super::Ctx;
use crate::grove::{field, poll_until, timed};
use crate::report::Row;
use crate::stats::{ms, Summary};
use anyhow::Result;
use std::time::{Duration, Instant};

const QUEUED: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    env.set_max_worktrees(Some(1))?;
    let result = measure(ctx);
    env.set_max_worktrees(None)?;
    result
}

fn measure(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let (mut drains, mut list) = (Vec::new(), Vec::new());
    for _ in 0..ctx.runs.max(1) {
        let drained = release(ctx, &mut list)?;
        drains.push(ms(drained));
    }
    Ok(vec![
        Row::new(
            "10",
            format!("{QUEUED} queued agents released one by one (cap 1): until all ended"),
            "ms",
        )
        .grove(Summary::of(&drains)),
        Row::new(
            "10",
            format!("grove --json list while {QUEUED} queued agents are released"),
            "ms",
        )
        .grove(Summary::of(&list))
        .note(format!(
            "{} list calls over {} runs",
            list.len(),
            drains.len()
        )),
    ])
}

/// One round: a holder takes the only slot, 20 agents queue behind it, the holder
/// ends; `grove list` is timed until the queue has drained. How long that took.
fn release(ctx: &Ctx<'_>, list: &mut Vec<f64>) -> Result<Duration> {
    let env = ctx.env;
    let repo = ctx.repos.tiny()?;
    let gate = env.root.join("case10-gate");
    let _ = std::fs::remove_file(&gate);
    let hold = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let holder = env.spawn(&repo.path, &["sh", "-c", &hold])?;
    field(&holder, "id")?;
    for _ in 0..QUEUED {
        let record = env.spawn(&repo.path, &["true"])?;
        field(&record, "id")?;
    }
    let started = Instant::now();
    std::fs::write(&gate, "")?;
    let done = poll_until(
        "the queue to drain",
        Duration::from_secs(300),
        Duration::from_millis(1),
        || {
            list.push(ms(timed(
                env.grove_command(&env.root).args(["--json", "list"]),
            )?));
            let live = env.grove_json(&env.root, &["list"])?["agents"]
                .as_array()
                .map_or(0, Vec::len);
            Ok(live == 0)
        },
    )?;
    Ok(done.duration_since(started))
}

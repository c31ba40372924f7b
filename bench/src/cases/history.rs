//! Case 13: what grows with history. With 1,000, 10,000 and 100,000 finished agent
//! records (10,000 at most with --quick): `grove --json list --all` against `cat` of a
//! file of the same bytes, the live-only `grove --json list` against `git --version`,
//! and daemon start → ready. One curve per row group, so a cost that grows with
//! history shows as a slope, not as one figure.
//!
//! The records are copies of one real finished record, stored straight into a stopped
//! daemon's database: spawning 100,000 agents would take the benchmark's whole budget.

use super::{make_records, Ctx};
use crate::grove::timed;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::{Context, Result};
use rusqlite::Connection;
use std::path::Path;
use std::process::Command;

/// Copies have ids from here on (8 hex digits, as grove's own), below `END_OF_COPIES`.
const FIRST_COPY: u32 = 0xe000_0000;
const END_OF_COPIES: u32 = 0xe100_0000;
/// A run takes milliseconds: as case 4, this case makes more runs than `--runs` says.
const MORE_RUNS: usize = 4;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    make_records(ctx, 1, std::time::Duration::from_secs(30))?;
    let db_path = env.home.join("grove.db");
    let sizes: &[usize] = if ctx.quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut rows = Vec::new();
    let measured = sizes.iter().try_for_each(|&size| {
        env.stop_daemon()?;
        store_copies(&db_path, size)?;
        rows.extend(measure(ctx, size)?);
        Ok::<_, anyhow::Error>(())
    });
    // The other cases run without the copies, whatever happened.
    env.stop_daemon()?;
    remove_copies(&db_path)?;
    measured?;
    Ok(rows)
}

fn measure(ctx: &Ctx<'_>, size: usize) -> Result<Vec<Row>> {
    let env = ctx.env;
    let mut starts = Vec::new();
    for run in 0..=ctx.runs {
        let (mut child, _, took) = env.start_daemon_until_ready()?;
        env.grove(&env.root, &["list"])?;
        env.stop_daemon()?;
        child.wait()?;
        if run > 0 {
            starts.push(ms(took));
        }
    }
    let listing = env.root.join("history-list.json");
    let all = env
        .grove_command(&env.root)
        .args(["--json", "list", "--all"])
        .output()
        .context("grove --json list --all")?;
    std::fs::write(&listing, &all.stdout)?;
    let mut cat = Command::new("cat");
    cat.arg(&listing);
    let all_row = compare(
        ctx,
        env.grove_command(&env.root)
            .args(["--json", "list", "--all"]),
        ("cat of the same bytes", &mut cat),
    )?;
    let mut git = env.git_command(&env.root);
    git.arg("--version");
    let live_row = compare(
        ctx,
        env.grove_command(&env.root).args(["--json", "list"]),
        ("git --version", &mut git),
    )?;
    let mib = all.stdout.len() as f64 / (1 << 20) as f64;
    Ok(vec![
        Row::new(
            "13",
            format!("grove --json list --all, {size} records"),
            "ms",
        )
        .grove(all_row.0)
        .baseline(all_row.1, all_row.2)
        .goal(Goal::at_most(Metric::Ratio, 3.0))
        .note(format!("{mib:.1} MiB of JSON")),
        Row::new(
            "13",
            format!("grove --json list (live only), {size} finished records"),
            "ms",
        )
        .grove(live_row.0)
        .baseline(live_row.1, live_row.2)
        .goal(Goal::at_most(Metric::Ratio, 3.0)),
        Row::new("13", format!("daemon start → ready, {size} records"), "ms")
            .grove(Summary::of(&starts))
            .goal(Goal::at_most(Metric::Median, 200.0)),
    ])
}

type Compared = (Option<Summary>, String, Option<Summary>);

/// Times `grove` and the baseline in turns, after one warm-up each.
fn compare(ctx: &Ctx<'_>, grove: &mut Command, baseline: (&str, &mut Command)) -> Result<Compared> {
    let (name, baseline) = baseline;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..=ctx.runs * MORE_RUNS {
        let g = timed(grove)?;
        let b = timed(baseline)?;
        if run > 0 {
            ours.push(ms(g));
            theirs.push(ms(b));
        }
    }
    Ok((Summary::of(&ours), name.to_string(), Summary::of(&theirs)))
}

/// Brings the copies in a stopped daemon's database up to `size`: each a finished
/// record as real as the first one grove made, older than every real one.
fn store_copies(db_path: &Path, size: usize) -> Result<()> {
    let mut db = Connection::open(db_path).context("opening grove.db")?;
    let (token, template): (String, String) = db
        .query_row(
            "SELECT token, record FROM agents WHERE status = 'collected' LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .context("a collected agent to copy")?;
    let mut record: serde_json::Value = serde_json::from_str(&template)?;
    let have: usize = db.query_row(
        "SELECT count(*) FROM agents WHERE id >= ?1 AND id < ?2",
        copies(),
        |row| row.get(0),
    )?;
    let tx = db.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT OR IGNORE INTO agents (id, status, created_at_ms, token, pid_start, record)
             VALUES (?1, 'collected', ?2, ?3, NULL, ?4)",
        )?;
        for n in have..size {
            let id = format!("{:08x}", FIRST_COPY + n as u32);
            let created = 1_000_000 + n as u64;
            record["id"] = id.clone().into();
            record["created_at_ms"] = created.into();
            insert.execute(rusqlite::params![
                id,
                created as i64,
                token,
                record.to_string()
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn remove_copies(db_path: &Path) -> Result<()> {
    let db = Connection::open(db_path)?;
    db.execute("DELETE FROM agents WHERE id >= ?1 AND id < ?2", copies())?;
    Ok(())
}

/// The bounds of the copies' ids.
fn copies() -> [String; 2] {
    [FIRST_COPY, END_OF_COPIES].map(|id| format!("{id:08x}"))
}

//! Case 5: durable state updates with 20 concurrent writers, each on its own connection;
//! then reads of the state at random checkpoints. The state API may not exist yet: a
//! daemon that answers METHOD_NOT_FOUND makes this case "n/a".

use super::Ctx;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Rng, Summary};
use anyhow::{bail, Context, Result};
use grove_proto::{codes, Client};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

const WRITERS: usize = 20;
const SESSION: &str = "bench";
const READS: usize = 1_000;
const MANY_CHECKPOINTS: u64 = 100_000;

enum Probe {
    Answered(Value),
    Missing,
}

/// Calls `method`; METHOD_NOT_FOUND is `Missing`, any other error fails.
fn call(client: &mut Client, method: &str, params: Value) -> Result<Probe> {
    let response = client.call_raw(method, params)?;
    match response.error {
        Some(e) if e.code == codes::METHOD_NOT_FOUND => Ok(Probe::Missing),
        Some(e) => bail!("{method}: {} (code {})", e.message, e.code),
        None => Ok(Probe::Answered(response.result.unwrap_or(Value::Null))),
    }
}

fn update_params() -> Value {
    json!({ "session": SESSION, "writes": [{ "channel": "n", "value": 1 }] })
}

/// The checkpoint an update result names, if it names one where we look.
fn checkpoint_of(result: &Value) -> Option<u64> {
    let named = |v: &Value| {
        v.as_u64().or_else(|| {
            ["id", "seq", "number", "checkpoint"]
                .iter()
                .find_map(|k| v[k].as_u64())
        })
    };
    named(result).or_else(|| named(&result["checkpoint"]))
}

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let not_available = || {
        Ok(vec![Row::not_available(
            "5",
            "durable state updates, 20 writers",
            "n/a (state API not available)",
        )])
    };
    let mut client = ctx.env.client()?;
    let schema = json!({
        "version": 1,
        "channels": { "n": { "reducer": "add" }, "items": { "reducer": "append" } }
    });
    let create = json!({ "name": SESSION, "schema": schema });
    if let Probe::Missing = call(&mut client, "session.create", create)? {
        return not_available();
    }
    let mut last = match call(&mut client, "state.update", update_params())? {
        Probe::Missing => return not_available(),
        Probe::Answered(result) => checkpoint_of(&result),
    };
    let mut applied: u64 = 1;
    let socket = ctx.env.socket();
    let per_writer = if ctx.quick { 250 } else { 1_000 };

    let mut rates = Vec::new();
    let mut acks = Vec::new();
    for run in 0..=ctx.runs {
        let round = write_round(&socket, per_writer)?;
        applied += (WRITERS * per_writer) as u64;
        last = last.max(round.last_checkpoint);
        if run > 0 {
            rates.push(round.per_second);
            acks.extend(round.acks_ms);
        }
    }
    let mut checkpoints = last.unwrap_or(applied);
    let mut rows = vec![
        Row::new(
            "5",
            format!("state updates/s, {WRITERS} writers × {per_writer}"),
            "/s",
        )
        .grove(Summary::of(&rates))
        .goal(Goal::at_least(Metric::Median, 20_000.0)),
        Row::new("5", "state update ack latency", "ms")
            .grove(Summary::of(&acks))
            .goal(Goal::at_most(Metric::P99, 5.0)),
    ];
    // The full run reads among at least 100,000 checkpoints; the rounds above may
    // have written them already.
    let missing = MANY_CHECKPOINTS.saturating_sub(checkpoints);
    if !ctx.quick && missing > 0 {
        let per_writer = (missing as usize).div_ceil(WRITERS);
        eprintln!("grove-bench: writing {} more updates", per_writer * WRITERS);
        let round = write_round(&socket, per_writer)?;
        applied += (WRITERS * per_writer) as u64;
        checkpoints = round.last_checkpoint.unwrap_or(applied);
    }
    rows.push(read_row(&mut client, checkpoints)?);
    if ctx.quick {
        rows.push(Row::not_available(
            "5",
            format!("state.get at random checkpoint of {MANY_CHECKPOINTS}"),
            "skipped (--quick)",
        ));
    }
    Ok(rows)
}

struct Round {
    per_second: f64,
    acks_ms: Vec<f64>,
    last_checkpoint: Option<u64>,
}

/// `WRITERS` threads, each on its own connection, each sending `per_writer` updates one
/// after the other; they start together.
fn write_round(socket: &Path, per_writer: usize) -> Result<Round> {
    let barrier = Arc::new(Barrier::new(WRITERS + 1));
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let socket = socket.to_path_buf();
            std::thread::spawn(move || -> Result<(Vec<f64>, Option<u64>)> {
                let client = Client::connect(&socket);
                barrier.wait();
                let mut client = client?;
                let mut acks = Vec::with_capacity(per_writer);
                let mut last = None;
                for _ in 0..per_writer {
                    let start = Instant::now();
                    let response = client.call_raw("state.update", update_params())?;
                    acks.push(ms(start.elapsed()));
                    if let Some(e) = response.error {
                        bail!("state.update: {} (code {})", e.message, e.code);
                    }
                    last = last.max(response.result.as_ref().and_then(checkpoint_of));
                }
                Ok((acks, last))
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut round = Round {
        per_second: 0.0,
        acks_ms: Vec::with_capacity(WRITERS * per_writer),
        last_checkpoint: None,
    };
    for writer in writers {
        let (acks, last) = writer
            .join()
            .map_err(|_| anyhow::anyhow!("a writer thread panicked"))??;
        round.acks_ms.extend(acks);
        round.last_checkpoint = round.last_checkpoint.max(last);
    }
    round.per_second = round.acks_ms.len() as f64 / start.elapsed().as_secs_f64();
    Ok(round)
}

/// Reads the state at `READS` random checkpoints in `1..=checkpoints`.
fn read_row(client: &mut Client, checkpoints: u64) -> Result<Row> {
    let mut rng = Rng::new(checkpoints);
    let mut reads = Vec::with_capacity(READS);
    for _ in 0..READS {
        let at = rng.range(1, checkpoints.max(1));
        let start = Instant::now();
        let response = client.call_raw("state.get", json!({ "session": SESSION, "at": at }))?;
        reads.push(ms(start.elapsed()));
        if let Some(e) = response.error {
            bail!("state.get at {at}: {} (code {})", e.message, e.code);
        }
        response
            .result
            .filter(|r| !r.is_null())
            .with_context(|| format!("state.get at {at} answered no state"))?;
    }
    Ok(Row::new(
        "5",
        format!("state.get at random checkpoint of {checkpoints}"),
        "ms",
    )
    .grove(Summary::of(&reads))
    .goal(Goal::at_most(Metric::P99, 2.0)))
}

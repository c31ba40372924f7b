//! Case 5: durable state updates with 20 concurrent writers, each on its own connection;
//! then reads of the state at random checkpoints. The state API may not exist yet: a
//! daemon that answers METHOD_NOT_FOUND makes this case "n/a".

use super::Ctx;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Rng, Summary};
use anyhow::{bail, Context, Result};
use grove_proto::{codes, Client};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

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
    // For work on one part: `GROVE_BENCH_STATE=code` (or `startup`) runs only that row,
    // `updates` only the update rate and ack latency.
    let only = std::env::var("GROVE_BENCH_STATE").ok();
    match only.as_deref() {
        Some("code") => return Ok(vec![checkpoint_with_code(ctx)?]),
        Some("startup") => return startup_with_sessions(ctx),
        _ => {}
    }
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
    if only.as_deref() == Some("updates") {
        return Ok(rows);
    }
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
    drop(client);
    rows.extend(metrics_cost(ctx, per_writer)?);
    rows.push(checkpoint_with_code(ctx)?);
    rows.extend(startup_with_sessions(ctx)?);
    rows.extend(session_gc_pass(ctx)?);
    if ctx.quick {
        rows.push(Row::not_available(
            "5",
            format!("state.get at random checkpoint of {MANY_CHECKPOINTS}"),
            "skipped (--quick)",
        ));
    }
    Ok(rows)
}

/// Update rates, and each daemon's CPU time per update, with metrics on against off:
/// two fresh daemons side by side, each written by half the writers at the same moments,
/// so that whatever else the machine does falls on both alike (rounds one after the
/// other swung by ±7 %, more than the cost to be measured). Which of the two has its
/// metrics on swaps every round (a restart each), so that neither daemon's luck (its
/// place in the scheduler, its cache) counts for one side only.
fn metrics_cost(ctx: &Ctx<'_>, per_writer: usize) -> Result<Vec<Row>> {
    let envs = [ctx.env.sibling()?, ctx.env.sibling()?];
    let schema = json!({ "version": 1, "channels": { "n": { "reducer": "add" } } });
    for env in &envs {
        let mut client = env.client()?;
        call(
            &mut client,
            "session.create",
            json!({ "name": SESSION, "schema": schema }),
        )?;
    }
    let sockets = [envs[0].socket(), envs[1].socket()];
    let rounds = if ctx.quick { ctx.runs } else { ctx.runs.max(9) };
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let (mut cpu_on, mut cpu_off) = (Vec::new(), Vec::new());
    for run in 0..=rounds {
        let first_on = run % 2 == 0;
        envs[0].set_metrics(first_on)?;
        envs[1].set_metrics(!first_on)?;
        let pids = [envs[0].daemon_pid()?, envs[1].daemon_pid()?];
        let before = [cpu_seconds(pids[0])?, cpu_seconds(pids[1])?];
        let written = write_rounds(&sockets, WRITERS / 2, per_writer)?;
        let mut cpu_us = [0.0; 2];
        for (i, round) in written.iter().enumerate() {
            cpu_us[i] = (cpu_seconds(pids[i])? - before[i]) * 1e6 / round.acks_ms.len() as f64;
        }
        let (with, without) = if first_on { (0, 1) } else { (1, 0) };
        if run > 0 {
            on.push(written[with].per_second);
            off.push(written[without].per_second);
            cpu_on.push(cpu_us[with]);
            cpu_off.push(cpu_us[without]);
        }
    }
    Ok(vec![
        Row::new("5", "state updates/s with metrics on", "/s")
            .grove(Summary::of(&on))
            .baseline("metrics off", Summary::of(&off))
            .goal(Goal::at_least(Metric::Ratio, 0.97))
            .note("two daemons side by side, 10 writers each, GROVE_METRICS on in one and off in the other, swapped every round"),
        Row::new("5", "daemon CPU per state update, metrics on", "µs")
            .grove(Summary::of(&cpu_on))
            .baseline("metrics off", Summary::of(&cpu_off))
            .goal(Goal::at_most(Metric::Ratio, 1.03)),
    ])
}

/// The CPU time `pid` has used so far (user and system), in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat =
        grove_sys::proc::stat(pid).with_context(|| format!("reading the CPU time of {pid}"))?;
    Ok(stat.cpu_ticks as f64 / grove_sys::proc::clock_ticks_per_second() as f64)
}

struct Round {
    per_second: f64,
    acks_ms: Vec<f64>,
    last_checkpoint: Option<u64>,
}

/// `WRITERS` threads, each on its own connection, each sending `per_writer` updates one
/// after the other; they start together.
fn write_round(socket: &Path, per_writer: usize) -> Result<Round> {
    let [round] = write_rounds(&[socket.to_path_buf()], WRITERS, per_writer)?;
    Ok(round)
}

/// `writers` threads per socket, all starting together; a round per socket, its rate
/// counted until its own last writer is done.
fn write_rounds<const N: usize>(
    sockets: &[std::path::PathBuf; N],
    writers: usize,
    per_writer: usize,
) -> Result<[Round; N]> {
    let barrier = Arc::new(Barrier::new(N * writers + 1));
    let threads: Vec<Vec<_>> = sockets
        .iter()
        .map(|socket| {
            (0..writers)
                .map(|_| {
                    let barrier = Arc::clone(&barrier);
                    let socket = socket.clone();
                    std::thread::spawn(move || -> Result<(Vec<f64>, Option<u64>, Instant)> {
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
                        Ok((acks, last, Instant::now()))
                    })
                })
                .collect()
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut rounds = Vec::with_capacity(N);
    for writers in threads {
        let mut round = Round {
            per_second: 0.0,
            acks_ms: Vec::with_capacity(writers.len() * per_writer),
            last_checkpoint: None,
        };
        let mut done = start;
        for writer in writers {
            let (acks, last, finished) = writer
                .join()
                .map_err(|_| anyhow::anyhow!("a writer thread panicked"))??;
            round.acks_ms.extend(acks);
            round.last_checkpoint = round.last_checkpoint.max(last);
            done = done.max(finished);
        }
        round.per_second = round.acks_ms.len() as f64 / (done - start).as_secs_f64();
        rounds.push(round);
    }
    rounds
        .try_into()
        .map_err(|_| anyhow::anyhow!("one round per socket"))
}

/// Reads the state at `READS` random checkpoints in `1..=checkpoints`, of those still
/// readable: past `checkpoint_keep` (400) older ones are compacted.
fn read_row(client: &mut Client, checkpoints: u64) -> Result<Row> {
    let oldest = match call(client, "session.show", json!({ "name": SESSION }))? {
        Probe::Answered(info) => info["oldest"].as_u64().unwrap_or(1).max(1),
        Probe::Missing => 1,
    };
    let mut rng = Rng::new(checkpoints);
    let mut reads = Vec::with_capacity(READS);
    for _ in 0..READS {
        let at = rng.range(oldest.min(checkpoints), checkpoints.max(1));
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

/// Checkpoints an agent writes in a 5,000-file worktree, one file edited before each:
/// each records the agent's branch tip and a tree of its worktree. Measured from the
/// bench's own connection acting with the agent's token (so that no CLI start is
/// counted), against the same updates by the user, which record no code.
fn checkpoint_with_code(ctx: &Ctx<'_>) -> Result<Row> {
    const CODE_SESSION: &str = "bench-code";
    let env = ctx.env;
    let repo = ctx.repos.medium()?;
    let updates = if ctx.quick { 20 } else { 100 };
    let mut client = env.client()?;
    let schema = json!({ "version": 1, "channels": { "n": { "reducer": "add" } } });
    call(
        &mut client,
        "session.create",
        json!({ "name": CODE_SESSION, "schema": schema }),
    )?;
    let token_file = env.root.join("bench-code-token");
    let gate = env.root.join("bench-code-go");
    let script = format!(
        "printf %s \"$GROVE_TOKEN\" > '{t}.part' && mv '{t}.part' '{t}' && \
         while [ ! -e '{g}' ]; do sleep 0.05; done",
        t = token_file.display(),
        g = gate.display()
    );
    let record = env.grove_json(
        &repo.path,
        &[
            "spawn",
            "--session",
            CODE_SESSION,
            "--",
            "sh",
            "-c",
            &script,
        ],
    )?;
    let worktree = std::path::PathBuf::from(crate::grove::field(&record, "worktree")?);
    crate::grove::poll_until(
        "the agent's token",
        Duration::from_secs(300),
        Duration::from_millis(10),
        || Ok(token_file.exists()),
    )?;
    let token = std::fs::read_to_string(&token_file)?;
    let update = |client: &mut Client, token: Option<&str>| -> Result<f64> {
        let mut params =
            json!({ "session": CODE_SESSION, "writes": [{ "channel": "n", "value": 1 }] });
        if let Some(token) = token {
            params = json!({ "token": token, "writes": [{ "channel": "n", "value": 1 }] });
        }
        let start = Instant::now();
        let response = client.call_raw("state.update", params)?;
        let took = ms(start.elapsed());
        if let Some(e) = response.error {
            bail!("state.update: {} (code {})", e.message, e.code);
        }
        Ok(took)
    };
    let measured = (|| {
        let mut agent = Vec::new();
        let mut first = 0.0;
        for n in 0..=updates {
            std::fs::write(worktree.join(&repo.sample_file), format!("edit {n}\n"))?;
            let took = update(&mut client, Some(&token))?;
            if n == 0 {
                first = took;
            } else {
                agent.push(took);
            }
        }
        let user = (0..updates)
            .map(|_| update(&mut client, None))
            .collect::<Result<Vec<f64>>>()?;
        Ok::<_, anyhow::Error>((first, agent, user))
    })();
    std::fs::write(&gate, b"")?;
    env.kill_live_agents()?;
    let (first, agent, user) = measured?;
    Ok(Row::new(
        "5",
        format!("state update by an agent, code recorded, {}", repo.label()),
        "ms",
    )
    .grove(Summary::of(&agent))
    .baseline("the user's update (no code)", Summary::of(&user))
    .goal(Goal::at_most(Metric::Median, 20.0))
    .note(format!(
        "one file edited before each; first checkpoint (scratch index made) {first:.1} ms; \
         the baseline is the same update by the user"
    )))
}

/// Sessions made for the start-up measurement, and taken away after it.
const SESSION_PREFIX: &str = "bench-startup-";

/// Daemon start → socket ready, and from ready to the first answer about a session,
/// with 1,000, 10,000 and 100,000 stored sessions (not the last with --quick), and what
/// each session costs the daemon in anonymous memory once they are read: heads are read
/// on first use, so neither start-up nor memory may grow much with the sessions.
fn startup_with_sessions(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let sizes: &[usize] = if ctx.quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    env.stop_daemon()?;
    let db_path = env.home.join("grove.db");
    let mut rows = Vec::new();
    let measured = (|| {
        let (_, _, empty) = starts(ctx)?;
        let empty = Summary::of(&empty).context("no start measured")?.median;
        for &count in sizes {
            remove_sessions(&db_path)?;
            insert_sessions(&db_path, count, "suspended", 1)?;
            let (times, answered, anon) = starts(ctx)?;
            let per_session: Vec<f64> = anon
                .iter()
                .map(|bytes| (bytes - empty).max(0.0) / count as f64)
                .collect();
            rows.extend(startup_rows(count, &times, &answered, &per_session));
        }
        Ok::<_, anyhow::Error>(())
    })();
    // The other cases run without them, whatever happened.
    env.stop_daemon()?;
    remove_sessions(&db_path)?;
    measured?;
    Ok(rows)
}

fn startup_rows(count: usize, times: &[f64], answered: &[f64], per_session: &[f64]) -> Vec<Row> {
    vec![
        Row::new(
            "5",
            format!("daemon start → socket ready, {count} sessions"),
            "ms",
        )
        .grove(Summary::of(times))
        .goal(Goal::at_most(Metric::Median, 200.0)),
        Row::new(
            "5",
            format!("ready → first session answered, {count} sessions"),
            "ms",
        )
        .grove(Summary::of(answered))
        .goal(Goal::at_most(Metric::Median, 50.0))
        .note("`grove session show` of one right after the ready line"),
        Row::new(
            "5",
            format!("daemon memory per stored session, {count} sessions"),
            "B",
        )
        .grove(Summary::of(per_session))
        .goal(Goal::at_most(Metric::Median, 200.0))
        .note("anonymous memory after that answer, less an empty daemon's, per session"),
    ]
}

/// `ctx.runs` starts after a warm-up: for each, start → ready and ready → first answer
/// (ms), and the daemon's anonymous memory then (bytes).
fn starts(ctx: &Ctx<'_>) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (mut times, mut answered, mut anon) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..=ctx.runs {
        let (took, first, bytes) = start_until_ready(ctx)?;
        if run > 0 {
            times.push(ms(took));
            answered.push(ms(first - took));
            anon.push(bytes as f64);
        }
    }
    Ok((times, answered, anon))
}

/// Stores `count` sessions of one checkpoint each straight into a stopped daemon's
/// database, in `lifecycle`, last written and used at `used_ms`.
fn insert_sessions(db_path: &Path, count: usize, lifecycle: &str, used_ms: u64) -> Result<()> {
    let mut db = rusqlite::Connection::open(db_path).context("opening grove.db")?;
    let schema = json!({"version": 1, "channels": {"n": {"reducer": "add"}}}).to_string();
    let tx = db.transaction()?;
    let mut session = tx.prepare(
        "INSERT INTO sessions (name, schema, schema_version, created_at_ms, head, oldest,
                               last_at_ms, last_changes, last_used_ms, lifecycle,
                               state_bytes)
         VALUES (?1, ?2, 1, 1, 1, 1, ?3, '{}', ?3, ?4, 8)",
    )?;
    let mut checkpoint = tx.prepare(
        "INSERT INTO checkpoints (session, id, at_ms, writer, source, channels, writes,
                                  schema_version)
         VALUES (?1, 1, 1, 'user', 'update', '[\"n\"]',
                 '[{\"channel\":\"n\",\"value\":1}]', 1)",
    )?;
    for n in 0..count {
        let name = format!("{SESSION_PREFIX}{n}");
        session.execute(rusqlite::params![name, schema, used_ms as i64, lifecycle])?;
        checkpoint.execute([&name])?;
    }
    drop((session, checkpoint));
    tx.commit()?;
    Ok(())
}

fn remove_sessions(db_path: &Path) -> Result<()> {
    let db = rusqlite::Connection::open(db_path)?;
    let like = format!("{SESSION_PREFIX}%");
    db.execute("DELETE FROM checkpoints WHERE session LIKE ?1", [&like])?;
    db.execute("DELETE FROM sessions WHERE name LIKE ?1", [&like])?;
    db.execute(
        "DELETE FROM session_removals WHERE record LIKE ?1",
        [format!("%{SESSION_PREFIX}%")],
    )?;
    Ok(())
}

/// The session lifecycle pass over 100,000 sessions (10,000 with --quick): one pass
/// that moves every one of them (idle → suspended: each leaves memory, an event each,
/// one stored change each) and the pass after it, which moves none. A pass's time is
/// when it ended (`last_session_gc_ms` of `daemon.status`) less when it was due (the
/// `next_session_gc_ms` the pass before announced).
fn session_gc_pass(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let count = if ctx.quick { 10_000 } else { 100_000 };
    env.stop_daemon()?;
    let db_path = env.home.join("grove.db");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    // Idle from the first pass on (nothing to move), suspended from 8 s on: the second
    // pass moves them all, the third none.
    insert_sessions(&db_path, count, "idle", now)?;
    let mut command = env.grove_command(&env.root);
    command
        .args(["daemon", "run"])
        .env("GROVE_SESSION_GC_INTERVAL", "3s")
        .env("GROVE_SESSION_IDLE", "1s")
        .env("GROVE_SESSION_SUSPEND", "8s")
        .env("GROVE_SESSION_CACHE", count.to_string())
        .env("GROVE_NOTIFY_READY", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().context("starting grove daemon run")?;
    let stdout = child.stdout.take().context("daemon stdout")?;
    let measured = (|| {
        // Asked before it is ready, a command would start a daemon of its own. The
        // daemon's stdout is read to its end, so that it never writes into a closed pipe.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.trim() == "grove-daemon-ready" {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(120)).is_err() {
            bail!("grove daemon run was not ready within 120s");
        }
        let status = || -> Result<(u64, u64)> {
            let s = env.grove_json(&env.root, &["daemon", "status"])?;
            Ok((
                s["last_session_gc_ms"].as_u64().unwrap_or(0),
                s["next_session_gc_ms"].as_u64().unwrap_or(0),
            ))
        };
        let mut passes: Vec<(u64, u64)> = Vec::new();
        // When the sessions turn suspended depends on how long start-up took: of the
        // passes after the first, the slowest moved them all and the fastest none.
        crate::grove::poll_until(
            "four session lifecycle passes",
            Duration::from_secs(120),
            Duration::from_millis(5),
            || {
                let now = status()?;
                if now.0 > 0 && passes.last().is_none_or(|last| last.0 != now.0) {
                    passes.push(now);
                }
                Ok(passes.len() >= 4)
            },
        )?;
        let took: Vec<f64> = (1..passes.len())
            .map(|k| passes[k].0.saturating_sub(passes[k - 1].1) as f64)
            .collect();
        let slowest = took.iter().copied().fold(0.0, f64::max);
        let fastest = took.iter().copied().fold(f64::MAX, f64::min);
        Ok::<_, anyhow::Error>((slowest, fastest))
    })();
    let stopped = env.stop_daemon();
    let _ = child.wait();
    remove_sessions(&db_path)?;
    stopped?;
    let (moving, steady) = measured?;
    Ok(vec![
        Row::new(
            "5",
            format!("session lifecycle pass, {count} sessions, all moving"),
            "ms",
        )
        .grove(Summary::of(&[moving]))
        .note("idle → suspended: each head leaves memory, one event and one stored change each"),
        Row::new(
            "5",
            format!("session lifecycle pass, {count} sessions, none moving"),
            "ms",
        )
        .grove(Summary::of(&[steady])),
    ])
}

/// Starts `grove daemon run` and times it until its ready line; stops it again.
/// Also returns when the first session was answered (a `grove session show` sent at
/// once after the ready line).
fn start_until_ready(ctx: &Ctx<'_>) -> Result<(Duration, Duration, u64)> {
    let env = ctx.env;
    let (mut child, start, took) = env.start_daemon_until_ready()?;
    // With no session stored the answer is "no session": as long to come, all the same.
    env.grove_command(&env.root)
        .args(["session", "show", &format!("{SESSION_PREFIX}0")])
        .output()
        .context("grove session show")?;
    let first = start.elapsed();
    let (anon, _) = grove_sys::proc::rss_split(child.id())
        .with_context(|| format!("cannot read the memory of pid {}", child.id()))?;
    env.stop_daemon()?;
    child.wait()?;
    Ok((took, first, anon))
}

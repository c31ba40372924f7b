//! Case 6: the daemon's memory, split into its own (anonymous) and mapped files, at
//! these moments: fresh, warm pool ready, 20 agents on the big repository (and the peak
//! while they start), idle after them, and once the idle repository was released; a
//! shim's memory; the daemon's wake-ups while idle.

use super::pool::{wait_for_warm_pool, POOL_SIZE};
use super::{spawn_sleepers, Ctx};
use crate::report::{Goal, Metric, Row};
use crate::stats::Summary;
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const AGENTS: usize = 20;
const IDLE_WINDOW: Duration = Duration::from_secs(5);
/// GROVE_REPO_IDLE_RELEASE here: the default minute would make the case wait that long.
const RELEASE_AFTER_S: u64 = 5;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    // A fresh daemon (what earlier cases did must not count as idle memory), with the
    // warm pool on as users have it.
    env.set_pool_size(POOL_SIZE)?;
    env.set_repo_idle_release(Some(RELEASE_AFTER_S))?;
    let pid = env.daemon_pid()?;
    std::thread::sleep(Duration::from_secs(1));
    let mut idle = Vec::new();
    let mut fresh = Split::default();
    let switches_before = context_switches(pid)?;
    for _ in 0..IDLE_WINDOW.as_secs() {
        std::thread::sleep(Duration::from_secs(1));
        idle.push(rss_mib(pid)?);
        fresh.sample(pid)?;
    }
    let wakeups = context_switches(pid)? - switches_before;

    let repo = ctx.repos.big()?;
    // The first spawn in a repository starts its pool.
    let mut records = spawn_sleepers(env, &repo.path, 1)?;
    wait_for_warm_pool(ctx, repo)?;
    let pool_ready = Split::sampled(pid, 5)?;
    let (more, starting) = sampling_while(pid, || spawn_sleepers(env, &repo.path, AGENTS - 1))?;
    records.extend(more?);
    std::thread::sleep(Duration::from_secs(1));
    let mut busy = Vec::new();
    let mut running = Split::default();
    for _ in 0..5 {
        busy.push(rss_mib(pid)?);
        running.sample(pid)?;
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut shims = Vec::new();
    let mut binaries = BTreeSet::new();
    for record in &records {
        let shim = record["pid"]
            .as_u64()
            .with_context(|| format!("running agent without a pid: {record}"))?;
        shims.push(rss_mib(shim as u32)?);
        binaries.insert(binary_name(shim as u32)?);
    }
    // Once the collects are done, the pool refills behind them: its last use of the
    // repository.
    let (stopped, stopping) = sampling_while(pid, || {
        env.kill_live_agents()?;
        wait_for_warm_pool(ctx, repo)
    })?;
    stopped?;
    let after = Split::sampled(pid, 5)?;
    std::thread::sleep(Duration::from_secs(RELEASE_AFTER_S + 1));
    let released = Split::sampled(pid, 5)?;
    let peak_anon = [&starting, &running, &stopping]
        .iter()
        .map(|split| split.peak_anon())
        .fold(0.0, f64::max);

    let on_big = format!("{AGENTS} running agents on {}", repo.spec.name);
    let mut rows = vec![
        Row::new("6", "daemon RSS, idle (fresh daemon)", "MiB")
            .grove(Summary::of(&idle))
            .goal(Goal::at_most(Metric::Median, 20.0)),
        Row::new("6", format!("daemon RSS, {on_big}"), "MiB").grove(Summary::of(&busy)),
        Row::new("6", format!("shim RSS ({AGENTS} shims)"), "MiB")
            .grove(Summary::of(&shims))
            .goal(Goal::at_most(Metric::Median, 2.0))
            .note(shim_note(&binaries)),
        Row::new(
            "6",
            format!("daemon wake-ups idle over {}s", IDLE_WINDOW.as_secs()),
            "",
        )
        .grove(Some(Summary::single(wakeups as f64)))
        .note("voluntary + nonvoluntary context switches, summed over all daemon threads"),
    ];
    rows.extend(fresh.rows("idle (fresh daemon)", None));
    rows.extend(pool_ready.rows(&format!("warm pool ready on {}", repo.spec.name), None));
    rows.extend(running.rows(&on_big, None));
    rows.push(
        Row::new(
            "6",
            format!(
                "daemon anonymous memory, peak over {AGENTS} agents on {}",
                repo.spec.name
            ),
            "MiB",
        )
        .grove(Some(Summary::single(peak_anon)))
        .goal(Goal::at_most(Metric::Median, 40.0))
        .note("the largest of samples every 100 ms, from the first spawn until all are collected"),
    );
    rows.extend(after.rows(&format!("idle after {AGENTS} agents"), Some(20.0)));
    rows.extend(released.rows(
        &format!("idle, repository released ({RELEASE_AFTER_S}s after its last use)"),
        Some(20.0),
    ));
    Ok(rows)
}

/// Runs `work` while a thread samples the daemon's memory every 100 ms.
fn sampling_while<T>(pid: u32, work: impl FnOnce() -> T) -> Result<(T, Split)> {
    let done = AtomicBool::new(false);
    let split = Mutex::new(Split::default());
    let result = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| -> Result<()> {
            while !done.load(Ordering::Relaxed) {
                split
                    .lock()
                    .map_err(|_| anyhow::anyhow!("sampler poisoned"))?
                    .sample(pid)?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        let sampled = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("the memory sampler panicked"));
        (result, sampled)
    });
    let (result, sampled) = result;
    sampled??;
    let split = split
        .into_inner()
        .map_err(|_| anyhow::anyhow!("sampler poisoned"))?;
    Ok((result, split))
}

/// The daemon's resident memory split: its own (anonymous) and mapped files (a
/// repository's pack and index count here, and the kernel may drop them at will).
#[derive(Default)]
struct Split {
    anon: Vec<f64>,
    file: Vec<f64>,
    /// Pack files and pack indexes mapped.
    packs: Vec<f64>,
}

impl Split {
    /// `n` samples 200 ms apart.
    fn sampled(pid: u32, n: usize) -> Result<Split> {
        let mut split = Split::default();
        for _ in 0..n {
            split.sample(pid)?;
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(split)
    }

    fn peak_anon(&self) -> f64 {
        self.anon.iter().copied().fold(0.0, f64::max)
    }

    fn sample(&mut self, pid: u32) -> Result<()> {
        let (anon, file) = grove_sys::proc::rss_split(pid)
            .with_context(|| format!("cannot read the memory of pid {pid}"))?;
        self.anon.push(anon as f64 / (1024.0 * 1024.0));
        self.file.push(file as f64 / (1024.0 * 1024.0));
        let mapped = grove_sys::proc::mapped_files(pid)
            .with_context(|| format!("cannot read the mappings of pid {pid}"))?;
        let is_pack =
            |p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "pack" || e == "idx");
        self.packs
            .push(mapped.iter().filter(|p| is_pack(p)).count() as f64);
        Ok(())
    }

    /// Rows for one moment; `anon_goal` bounds the anonymous part.
    fn rows(&self, moment: &str, anon_goal: Option<f64>) -> Vec<Row> {
        let anon = Row::new("6", format!("daemon anonymous memory, {moment}"), "MiB")
            .grove(Summary::of(&self.anon));
        let anon = match anon_goal {
            Some(goal) => anon.goal(Goal::at_most(Metric::Median, goal)),
            None => anon,
        };
        let file = Row::new("6", format!("daemon file-backed memory, {moment}"), "MiB")
            .grove(Summary::of(&self.file))
            .note("mapped files (packs, indexes, the binary): RssFile + RssShmem");
        let packs = Row::new(
            "6",
            format!("daemon's mapped packs and indexes, {moment}"),
            "",
        )
        .grove(Summary::of(&self.packs))
        .note("git packs (.pack) and their indexes (.idx) in /proc/<pid>/maps");
        vec![anon, file, packs]
    }
}

/// Which binary the shims ran: the separate shim binary is what the goal is about, and
/// a daemon that did not find it falls back to `grove __shim` without failing.
fn shim_note(binaries: &BTreeSet<String>) -> String {
    let names = binaries.iter().cloned().collect::<Vec<_>>().join(", ");
    if binaries.iter().all(|b| b.ends_with("-shim")) {
        format!("the shims run {names}")
    } else {
        format!(
            "the shims run {names}, not grove-shim: it is missing next to grove \
             (`cargo build --release -p grove-ctl` builds both)"
        )
    }
}

/// File name of the executable `pid` runs.
fn binary_name(pid: u32) -> Result<String> {
    let exe = grove_sys::proc::exe(pid)
        .with_context(|| format!("cannot tell which executable pid {pid} runs"))?;
    Ok(exe.file_name().map_or_else(
        || exe.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    ))
}

/// Resident memory in MiB.
pub fn rss_mib(pid: u32) -> Result<f64> {
    let bytes = grove_sys::proc::rss_bytes(pid)
        .with_context(|| format!("cannot read the memory of pid {pid}"))?;
    Ok(bytes as f64 / (1024.0 * 1024.0))
}

/// Voluntary + nonvoluntary context switches of every thread of `pid`.
fn context_switches(pid: u32) -> Result<u64> {
    grove_sys::proc::context_switches(pid)
        .with_context(|| format!("cannot read the context switches of pid {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(rss_mib(pid).expect("rss") > 0.0);
        let (anon, file) = grove_sys::proc::rss_split(pid).expect("split");
        assert!(anon > 0 && file > 0);
        std::thread::sleep(Duration::from_millis(2));
        assert!(context_switches(pid).expect("switches") > 0);
    }
}

//! Case 11: what the jail costs: a jailed spawn (its own repository, namespaces and
//! view, Landlock) against an unjailed one, alternating in the same run on the small
//! repository, pooled and not; and a jailed agent's work against the same work unjailed.

use super::{spawn, Ctx};
use crate::grove::field;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The agent's work in the build rows: a debug build of a crate with no dependencies,
/// timed inside the agent (its spawn and collect left out), in milliseconds.
const BUILD: &str = "start=$(date +%s%N); cargo build -q --offline || exit 1; \
                     echo \"built-in-ms=$(( ($(date +%s%N) - start) / 1000000 ))\"";

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let repo = ctx.repos.small()?;
    let (mut jailed, mut plain) = (Vec::new(), Vec::new());
    // One warm-up of each, then alternate, so that both see the same machine.
    for run in 0..=ctx.runs {
        let j = spawn::grove_once_with(ctx, repo, &["--jail"])?;
        let p = spawn::grove_once_with(ctx, repo, &["--no-jail"])?;
        if run > 0 {
            jailed.push(ms(j));
            plain.push(ms(p));
        }
    }
    let (jailed, plain) = (Summary::of(&jailed), Summary::of(&plain));
    let added = jailed
        .zip(plain)
        .and_then(|(j, p)| Summary::of(&[j.median - p.median]));
    let pooled = pooled_rows(ctx);
    let build = build_rows(ctx);
    let mut rows = vec![
        Row::new(
            "11",
            format!("jailed spawn → first log line, {}", repo.label()),
            "ms",
        )
        .grove(jailed)
        .baseline("unjailed spawn, same run", plain)
        .note("--jail: its own repository, namespaces, view and Landlock"),
        Row::new("11", "time the jail adds to a spawn (medians)", "ms")
            .grove(added)
            .goal(Goal::at_most(Metric::Median, 10.0))
            .note("jailed median - unjailed median, same run"),
    ];
    rows.extend(pooled.unwrap_or_else(|e| {
        vec![Row::not_available(
            "11",
            "jailed pooled spawn",
            format!("{e:#}"),
        )]
    }));
    rows.push(build.unwrap_or_else(|e| {
        Row::not_available(
            "11",
            "jailed cargo build of a small crate",
            format!("{e:#}"),
        )
    }));
    Ok(rows)
}

/// Pooled spawns jailed and not, alternating, each once the pool is ready: a jailed
/// agent's pool worktree becomes a repository of its own as it is taken.
fn pooled_rows(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let repo = ctx.repos.small()?;
    ctx.env.set_pool_size(super::pool::POOL_SIZE)?;
    let measured = (|| -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut jailed, mut plain) = (Vec::new(), Vec::new());
        // The first spawn starts the repository's pool: the warm-up.
        spawn::grove_once(ctx, repo)?;
        for _ in 0..ctx.runs {
            super::pool::wait_for_warm_pool(ctx, repo)?;
            jailed.push(ms(spawn::grove_once_with(ctx, repo, &["--jail"])?));
            super::pool::wait_for_warm_pool(ctx, repo)?;
            plain.push(ms(spawn::grove_once_with(ctx, repo, &["--no-jail"])?));
        }
        Ok((jailed, plain))
    })();
    ctx.env.set_pool_size(0)?;
    let (jailed, plain) = measured?;
    let (jailed, plain) = (Summary::of(&jailed), Summary::of(&plain));
    let added = jailed
        .zip(plain)
        .and_then(|(j, p)| Summary::of(&[j.median - p.median]));
    Ok(vec![
        Row::new(
            "11",
            format!("jailed pooled spawn → first log line, {}", repo.label()),
            "ms",
        )
        .grove(jailed)
        .baseline("unjailed pooled spawn, same run", plain)
        .note("a warm-pool worktree given a .git of its own as it is taken"),
        Row::new("11", "time the jail adds to a pooled spawn (medians)", "ms")
            .grove(added)
            .goal(Goal::at_most(Metric::Median, 10.0))
            .note("jailed median - unjailed median, same run"),
    ])
}

/// A jailed agent's `cargo build` against the same build unjailed, alternating.
fn build_rows(ctx: &Ctx<'_>) -> Result<Row> {
    if which("cargo").is_none() {
        bail!("cargo is not on PATH");
    }
    let repo = small_crate(ctx)?;
    let (mut jailed, mut plain) = (Vec::new(), Vec::new());
    for run in 0..=ctx.runs {
        let j = build_once(ctx, &repo, "--jail")?;
        let p = build_once(ctx, &repo, "--no-jail")?;
        if run > 0 {
            jailed.push(j);
            plain.push(p);
        }
    }
    Ok(
        Row::new("11", "jailed agent's cargo build of a small crate", "ms")
            .grove(Summary::of(&jailed))
            .baseline("the same build unjailed, same run", Summary::of(&plain))
            .goal(Goal::at_most(Metric::Ratio, 1.05))
            .note("debug build, no dependencies, timed inside the agent"),
    )
}

fn build_once(ctx: &Ctx<'_>, repo: &Path, jail: &str) -> Result<f64> {
    let env = ctx.env;
    // The benchmark's HOME is its temp dir: the toolchain is the account's.
    let toolchain = toolchain_env();
    let mut flags = vec![jail];
    for var in &toolchain {
        flags.extend(["--env", var]);
    }
    let record = env.spawn_with(repo, &flags, &["sh", "-c", BUILD])?;
    let id = field(&record, "id")?;
    env.grove(&env.root, &["wait", id])?;
    let log = std::fs::read_to_string(field(&record, "log_path")?).context("the build's log")?;
    log.lines()
        .find_map(|l| l.strip_prefix("built-in-ms="))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("the {jail} build did not finish: {log}"))
}

/// A git repository holding a crate of 1,500 chained functions (~1 s to build).
fn small_crate(ctx: &Ctx<'_>) -> Result<PathBuf> {
    let env = ctx.env;
    let dir = env.root.join("small-crate");
    std::fs::create_dir_all(dir.join("src")).context("creating the crate")?;
    let mut lib = String::from("pub fn f0(x: u64) -> u64 { x + 1 }\n");
    for i in 1..1500 {
        lib.push_str(&format!(
            "pub fn f{i}(x: u64) -> u64 {{ f{}(x).wrapping_mul({i}) ^ {i} }}\n",
            i - 1
        ));
    }
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"small\"\nversion = \"0.1.0\"\nedition = \"2021\"\n".to_string(),
        ),
        (".gitignore", "target/\n".to_string()),
        ("src/lib.rs", lib),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    env.git(&dir, &["init", "-q", "-b", "main"])?;
    env.git(&dir, &["add", "-A"])?;
    env.git(&dir, &["commit", "-qm", "a small crate"])?;
    Ok(dir)
}

/// `RUSTUP_HOME` and `CARGO_HOME` as this process has them (explicit, or in its HOME).
fn toolchain_env() -> Vec<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    ["RUSTUP_HOME", "CARGO_HOME"]
        .iter()
        .zip([".rustup", ".cargo"])
        .filter_map(|(var, dir)| {
            let path = std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(dir)))?;
            Some(format!("{var}={}", path.display()))
        })
        .collect()
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

//! `grove-bench`: grove against git itself. A benchmark, not a test: it prints figures
//! and whether they meet their goals, and never fails because a machine is slow.
//!
//! `cargo build --release -p grove-ctl && cargo run --release -p grove-bench -- --help`

mod cases;
mod grove;
mod loopfs;
mod report;
mod repos;
mod stats;

use anyhow::{bail, Context, Result};
use clap::Parser;
use report::Row;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// Benchmarks grove against git itself: spawn, collect, list, state, memory, start-up.
#[derive(Debug, Parser)]
#[command(name = "grove-bench")]
struct Args {
    /// The grove binary [default: `grove` next to this executable, i.e. target/release/grove].
    #[arg(long, value_name = "PATH")]
    grove: Option<PathBuf>,
    /// A couple of minutes: big repo of 5,000 files (~30 MB), fewer records, no
    /// 100,000-checkpoint read.
    #[arg(long)]
    quick: bool,
    /// The cases to run, e.g. 1,3,4 [default: all, 1-15].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    cases: Vec<u32>,
    /// Measured runs per case, after one warm-up (case 4, which takes milliseconds, makes ten times as many).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Print the figures as JSON on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Also write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Keep the temp dir (repositories, GROVE_HOME) for a look afterwards.
    #[arg(long)]
    keep_temp: bool,
}

/// Everything one run measured, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Results {
    date: String,
    machine: Machine,
    grove: String,
    git: String,
    quick: bool,
    runs: u32,
    cases: Vec<u32>,
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpu: String,
    cores: usize,
    kernel: String,
    /// File system of the temp dir that holds the repositories and worktrees.
    filesystem: String,
    /// 1-minute load average when the run started and when it ended: other work on the
    /// machine shows here, and skews every figure.
    load_start: f64,
    load_end: f64,
}

fn load_average() -> f64 {
    grove_sys::proc::load_average().unwrap_or(f64::NAN)
}

impl Machine {
    fn probe(dir: &Path) -> Machine {
        Machine {
            cpu: grove_sys::proc::cpu_model().unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: grove_sys::proc::kernel_release().unwrap_or_default(),
            filesystem: grove_sys::proc::filesystem_type(dir).unwrap_or_else(|| "unknown".into()),
            load_start: load_average(),
            load_end: f64::NAN,
        }
    }
}

fn locate_grove(given: Option<PathBuf>) -> Result<PathBuf> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .context("finding this executable")?
            .with_file_name("grove"),
    };
    if !path.is_file() {
        bail!(
            "no grove binary at {}: build it first with `cargo build --release -p grove-ctl` \
             (or pass --grove PATH)",
            path.display()
        );
    }
    // The cases run grove from other directories (repos, worktrees).
    path.canonicalize()
        .with_context(|| format!("resolving {}", path.display()))
}

fn version(command: &str, arg: &str) -> String {
    std::process::Command::new(command)
        .arg(arg)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn measure(args: &Args, grove: PathBuf, cases: &[u32]) -> Result<(Vec<Row>, Machine)> {
    let env = grove::Env::new(grove, args.keep_temp)?;
    eprintln!(
        "grove-bench: working in {} (if interrupted: GROVE_HOME={} grove daemon stop)",
        env.root.display(),
        env.home.display()
    );
    let machine = Machine::probe(&env.root);
    let repos = repos::Repos::new(&env, args.quick);
    let ctx = cases::Ctx {
        env: &env,
        repos: &repos,
        runs: args.runs as usize,
        quick: args.quick,
        unpooled: Default::default(),
    };
    let rows = cases
        .iter()
        .flat_map(|&case| cases::run(case, &ctx))
        .collect();
    let machine = Machine {
        load_end: load_average(),
        ..machine
    };
    Ok((rows, machine))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grove-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<()> {
    let args = Args::parse();
    let grove = locate_grove(args.grove.clone())?;
    let cases = if args.cases.is_empty() {
        cases::ALL.to_vec()
    } else {
        args.cases.clone()
    };
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let (rows, machine) = measure(&args, grove.clone(), &cases)?;
    let results = Results {
        date,
        git: version("git", "--version"),
        grove: format!(
            "{} ({})",
            grove.display(),
            version(&grove.to_string_lossy(), "--version")
        ),
        machine,
        quick: args.quick,
        runs: args.runs,
        cases,
        rows,
    };
    let table = table(&results);
    if args.json {
        eprintln!("{table}");
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!("{table}");
    }
    if let Some(path) = &args.json_out {
        std::fs::write(path, serde_json::to_string_pretty(&results)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A figure with as many decimals as its size and unit deserve, without the unit.
fn figure(value: f64, unit: &str) -> String {
    let digits = match unit {
        "ms" if value < 10.0 => 2,
        "ms" if value < 100.0 => 1,
        "MiB" => 1,
        "checkouts" => 2,
        _ => 0,
    };
    format!("{value:.digits$}")
}

fn number(value: f64, unit: &str) -> String {
    if unit.is_empty() {
        figure(value, unit)
    } else {
        format!("{} {unit}", figure(value, unit))
    }
}

/// The result table, then the notes of the rows that have one.
fn table(results: &Results) -> String {
    let header = [
        "case",
        "what",
        "grove median (min–max)",
        "baseline",
        "baseline median",
        "ratio",
        "goal",
        "met?",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    let mut notes = Vec::new();
    for row in &results.rows {
        let unit = row.unit.as_str();
        let grove = match (&row.grove, &row.note) {
            (Some(s), _) if s.samples == 1 => number(s.median, unit),
            (Some(s), _) => {
                let mut text = format!(
                    "{} ({}–{})",
                    number(s.median, unit),
                    figure(s.min, unit),
                    figure(s.max, unit)
                );
                if let Some(p99) = s.p99 {
                    text.push_str(&format!(" p99 {}", figure(p99, unit)));
                }
                text
            }
            (None, Some(note)) if note.chars().count() <= 40 => note.clone(),
            (None, _) => "error, see below".into(),
        };
        if let Some(note) = &row.note {
            if row.grove.is_some() || note.chars().count() > 40 {
                notes.push(format!("case {} ({}): {note}", row.case, row.what));
            }
        }
        lines.push(vec![
            row.case.clone(),
            row.what.clone(),
            grove,
            row.baseline_what.clone().unwrap_or_else(|| "-".into()),
            row.baseline
                .map_or_else(|| "-".into(), |b| number(b.median, unit)),
            row.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
            row.goal.map_or_else(|| "-".into(), |g| g.text(unit)),
            match row.met {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let machine = &results.machine;
    let mut out = format!(
        "grove-bench {} — {} cores, {}, {}, load {:.1} → {:.1}, {}, {} runs{}\n",
        results.date,
        machine.cores,
        machine.cpu,
        machine.filesystem,
        machine.load_start,
        machine.load_end,
        results.git,
        results.runs,
        if results.quick { ", --quick" } else { "" }
    );
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell}{}", " ".repeat(w - cell.chars().count())))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
    }
    for note in notes {
        out.push_str(&format!("\n{note}"));
    }
    out
}

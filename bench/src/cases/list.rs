//! Case 4: `grove --json list` with 1,000 agent records, against `git --version` (the
//! floor of starting a process).

use super::{make_records, Ctx};
use crate::grove::timed;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::Result;
use std::time::Duration;

const RECORDS: usize = 1_000;
/// A run takes milliseconds, and a single slow wake-up on a shared machine moves the
/// median of five: this case makes ten times as many runs as `--runs` says.
const MORE_RUNS: usize = 10;
const BUDGET: Duration = Duration::from_secs(60);

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let env = ctx.env;
    let count = make_records(ctx, RECORDS, BUDGET)?;
    let listed = env.grove_json(&env.root, &["list", "--all"])?["agents"]
        .as_array()
        .map_or(0, Vec::len);
    let mut rows = Vec::new();
    for (what, args) in [
        ("--all", &["--json", "list", "--all"][..]),
        ("(live only)", &["--json", "list"][..]),
    ] {
        let (mut grove, mut git) = (Vec::new(), Vec::new());
        for run in 0..=ctx.runs * MORE_RUNS {
            let g = timed(env.grove_command(&env.root).args(args))?;
            let b = timed(env.git_command(&env.root).arg("--version"))?;
            if run > 0 {
                grove.push(ms(g));
                git.push(ms(b));
            }
        }
        let mut row = Row::new(
            "4",
            format!("grove --json list {what}, {count} records"),
            "ms",
        )
        .grove(Summary::of(&grove))
        .baseline("git --version", Summary::of(&git))
        .goal(Goal::at_most(Metric::Ratio, 3.0));
        if count < RECORDS {
            row = row.note(format!(
                "only {count} records fit the {}s budget for making them",
                BUDGET.as_secs()
            ));
        }
        if listed != count {
            row = row.note(format!(
                "grove list --all shows {listed} agents, but {count} were spawned"
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}

//! Case 11: what the jail costs: a jailed spawn (its own repository, namespaces and
//! view, Landlock) against an unjailed one, alternating in the same run on the small
//! repository; and a jailed agent's work against the same work unjailed.

use super::{spawn, Ctx};
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, Summary};
use anyhow::Result;

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
    Ok(vec![
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
    ])
}

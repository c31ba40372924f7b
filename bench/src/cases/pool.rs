//! Case 2: spawn from a pool of warm worktrees. grove has no pool yet.

use crate::report::Row;

pub fn run() -> Vec<Row> {
    vec![Row::not_available(
        "2",
        "pooled spawn → agent running",
        "n/a (no warm pool yet)",
    )]
}

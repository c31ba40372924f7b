//! Budgets for what an agent uses outside its cgroup: one agent must not hurt the
//! others' work through what grove keeps for it.

mod support;

use std::path::Path;
use support::*;

const MARKER_TAIL: &str = " bytes of older output dropped (log_max)]";

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[test]
fn an_agent_printing_without_end_keeps_only_its_newest_output_within_log_max() {
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX", "64K")]);
    // 3 MB (whole lines) as fast as `yes` writes, then a last line: what a runaway agent leaves.
    let id = g.spawn(&[], "yes grove-budget | head -c 2999997; echo THE-END");
    let log = g.succeeded_log(&id);
    let dir = g.home.join("agents").join(&id);
    let on_disk = size(&dir.join("output.log")) + size(&dir.join("output.log.old"));
    assert!(
        on_disk <= (64 << 10) + 256,
        "{on_disk} bytes of log on disk, over log_max"
    );
    let (first, kept) = log.split_once('\n').expect("a marker line");
    let dropped: u64 = first
        .strip_prefix("[grove: ")
        .and_then(|rest| rest.strip_suffix(MARKER_TAIL))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dropped marker first: {first:?}"));
    assert!(
        kept.ends_with("grove-budget\nTHE-END\n"),
        "newest output lost"
    );
    assert!(
        kept.len() as u64 >= 32 << 10,
        "less than half of log_max kept"
    );
    assert_eq!(
        dropped + kept.len() as u64,
        3_000_005,
        "dropped and kept bytes account for every byte written"
    );
}

#[test]
fn a_terminal_agents_log_keeps_its_budget_too() {
    let g = Grove::new().with_env(&[("GROVE_LOG_MAX", "64K")]);
    let id = g.spawn(
        &["--tty"],
        "yes grove-budget | head -c 999999; echo THE-END",
    );
    let log = g.succeeded_log(&id);
    let dir = g.home.join("agents").join(&id);
    let on_disk = size(&dir.join("output.log")) + size(&dir.join("output.log.old"));
    assert!(
        on_disk <= (64 << 10) + 256,
        "{on_disk} bytes of log on disk"
    );
    assert!(log.contains(MARKER_TAIL), "no dropped marker");
    assert!(log.trim_end().ends_with("THE-END"), "newest output lost");
}

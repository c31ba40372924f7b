//! The core's queue: a start re-saves no other queued row, and what cannot be read is
//! an error, never a reason to cancel.

mod support;

use std::fs;
use std::time::Duration;
use support::*;

const LONG: Duration = Duration::from_secs(60);

/// A queued agent's saved `--env` values that this grove cannot read: before, the
/// agent was cancelled as if its start had been interrupted; now it stays queued and
/// the daemon says why.
#[test]
fn a_queued_agent_whose_environment_cannot_be_read_stays_queued() {
    let (g, first, hold) = one_slot_held();
    let queued = g.spawn(&["--env", "SECRET=x"], "true");
    assert_eq!(g.status(&queued), "queued");
    let db = g.stopped_db();
    let changed = db
        .execute(
            "UPDATE queued_env SET env = 'not json' WHERE agent_id = ?1",
            [&queued],
        )
        .expect("update");
    assert_eq!(changed, 1, "the queued agent's environment was saved");
    drop(db);

    g.ok(&["list"]);
    fs::write(&hold, "").expect("release");
    assert_eq!(g.wait(&first)["exit_code"], 0);
    eventually("the daemon says it cannot read it", LONG, || {
        g.daemon_log()
            .contains("cannot read a queued agent's environment")
    });
    assert_eq!(g.status(&queued), "queued", "not cancelled");
    let record = g.record(&queued);
    assert!(record["error"].is_null(), "{record}");
    g.ok(&["kill", &queued]);
}

/// A directory nobody owns held the last slot when the daemon started, and the queue
/// was admitted against it: once the start-up scan reaps it, the queued agent starts.
/// Before, it waited for some other event (an agent ending, a spawn), forever if none
/// came.
#[test]
fn a_slot_the_start_up_scan_frees_starts_the_queued_agent() {
    let (g, first, release) = one_slot_held();
    let queued = g.spawn(&[], "echo ran > ran.txt");
    assert_eq!(g.status(&queued), "queued");
    let worktree = g.record(&first)["worktree"]
        .as_str()
        .map(std::path::PathBuf::from)
        .expect("worktree");
    g.ok(&["daemon", "stop"]);
    // A worktree no record owns (a killed merge's, say), beside the first agent's.
    let orphan = worktree.with_file_name("orphan");
    g.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "orphan",
        orphan.to_str().expect("utf8"),
    ]);
    fs::write(&release, "").expect("release");
    eventually("the first agent ended", LONG, || {
        g.home
            .join("agents")
            .join(&first)
            .join("exit.json")
            .exists()
    });

    let scan_gate = g.dir.path().join("scan may go");
    let started = g.run_env(
        &["list"],
        &[
            ("GROVE_TEST_HOLD_AT", "startup_scan"),
            ("GROVE_TEST_HOLD_UNTIL", scan_gate.to_str().expect("utf8")),
        ],
    );
    assert_eq!(started.code, 0, "{}", started.stderr);
    assert_eq!(g.wait(&first)["status"], "collected");
    assert_eq!(g.status(&queued), "queued", "the orphan holds the slot");
    fs::write(&scan_gate, "").expect("gate");
    eventually("the queued agent started and ended", LONG, || {
        g.status(&queued) == "collected"
    });
    assert!(!orphan.exists(), "the orphan was reaped");
    assert_eq!(g.record(&queued)["outcome"], "succeeded");
}

/// Twenty queued agents released one by one, all in order, none lost; the queue
/// positions `grove list` shows stay 1..n as agents leave it.
#[test]
fn twenty_queued_agents_start_in_order_and_positions_follow() {
    let (g, first, hold) = one_slot_held();
    let order = g.dir.path().join("order");
    let ids: Vec<String> = (0..20)
        .map(|i| g.spawn(&[], &format!("echo {i} >> {}", order.display())))
        .collect();
    let queue = g.json(&["queue"]);
    let positions: Vec<u64> = each(&queue, "agents")
        .filter_map(|a| a["queue_position"].as_u64())
        .collect();
    assert_eq!(positions, (1..=20).collect::<Vec<u64>>(), "{queue}");
    // Positions survive a restart: rebuilt from arrival, not from what each row said.
    g.crash_daemon();
    g.ok(&["list"]);
    assert_eq!(g.record(&ids[19])["queue_position"], 20);
    fs::write(&hold, "").expect("release");
    g.wait(&first);
    for id in &ids {
        assert_eq!(g.wait(id)["exit_code"], 0);
    }
    let started: Vec<String> = fs::read_to_string(&order)
        .expect("order")
        .lines()
        .map(str::to_string)
        .collect();
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(started, expected);
}

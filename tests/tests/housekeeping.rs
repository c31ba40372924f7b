//! Housekeeping for real: the cap and its queue, the start-up scan, prune and retention,
//! salvage on every removal path.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const LONG: Duration = Duration::from_secs(60);

fn gate_script(gates: &Path, name: &str) -> String {
    format!(
        "while [ ! -e '{}/{name}' ]; do sleep 0.05; done",
        gates.display()
    )
}

fn queue_ids(g: &Grove) -> Vec<String> {
    g.json(&["queue"])["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn cap_queues_beyond_twenty_in_order_and_survives_a_daemon_crash() {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "20")]);
    let gates = g.make_dir("gates");
    let ids: Vec<String> = (0..25)
        .map(|i| g.spawn(&[], &gate_script(&gates, &i.to_string())))
        .collect();
    let running: Vec<String> = g.json(&["list"])["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter(|a| a["status"] == "running")
        .map(|a| a["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(running, ids[..20].to_vec());
    assert_eq!(queue_ids(&g), ids[20..].to_vec());
    let queued = g.record(&ids[22]);
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["queue_position"], 3);
    assert_eq!(g.worktree_dirs().len(), 20);

    // The queue is persisted: a crash and restart keeps it, in order.
    g.crash_daemon();
    assert_eq!(queue_ids(&g), ids[20..].to_vec());
    assert_eq!(g.worktree_dirs().len(), 20);

    // Each finished agent frees a slot for the next one in line, and only that one.
    for step in 0..5 {
        fs::write(gates.join(step.to_string()), "").expect("gate");
        let next = &ids[20 + step];
        eventually(&format!("{next} starts"), LONG, || {
            g.status(next) == "running"
        });
        assert_eq!(queue_ids(&g), ids[21 + step..].to_vec());
    }
    for i in 5..25 {
        fs::write(gates.join(i.to_string()), "").expect("gate");
    }
    let mut args = vec!["wait"];
    args.extend(ids.iter().map(String::as_str));
    let done = g.json(&args);
    for agent in done["agents"].as_array().expect("agents") {
        assert_eq!(agent["outcome"], "succeeded", "{agent}");
    }
    assert!(g.worktree_dirs().is_empty());
    g.git(&["fsck", "--strict"]);
}

#[test]
fn kill_cancels_a_queued_agent() {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "1")]);
    let gates = g.make_dir("gates");
    let first = g.spawn(&[], &gate_script(&gates, "a"));
    let second = g.spawn(&[], "true");
    let third = g.spawn(&[], "true");
    assert_eq!(queue_ids(&g), vec![second.clone(), third.clone()]);
    let cancelled = g.json(&["kill", &second]);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(queue_ids(&g), vec![third.clone()]);
    assert_eq!(g.record(&third)["queue_position"], 1);
    fs::write(gates.join("a"), "").expect("gate");
    assert_eq!(g.wait(&third)["outcome"], "succeeded");
    assert_eq!(g.wait(&first)["outcome"], "succeeded");
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
}

/// Writes a tracked change and an untracked binary file into `worktree`.
fn leave_work(worktree: &Path, tag: &str) -> (Vec<u8>, Vec<u8>) {
    let tracked = format!("one\ntwo changed by {tag}\nthree\n").into_bytes();
    let untracked = [b"\x00\x01\xffbinary ".as_slice(), tag.as_bytes()].concat();
    fs::write(worktree.join("src/lib.txt"), &tracked).expect("write");
    fs::write(worktree.join("notes.bin"), &untracked).expect("write");
    (tracked, untracked)
}

fn blob(g: &Grove, rev: &str, path: &str) -> Vec<u8> {
    std::process::Command::new("git")
        .arg("-C")
        .arg(&g.repo)
        .args(["cat-file", "blob", &format!("{rev}:{path}")])
        .output()
        .expect("git cat-file")
        .stdout
}

fn assert_work_on(g: &Grove, rev: &str, work: &(Vec<u8>, Vec<u8>)) {
    assert_eq!(
        blob(g, rev, "src/lib.txt"),
        work.0,
        "tracked change on {rev}"
    );
    assert_eq!(blob(g, rev, "notes.bin"), work.1, "untracked file on {rev}");
}

fn kept_agent(g: &Grove) -> (String, PathBuf) {
    let id = g.spawn(&["--keep"], "echo kept > kept.txt");
    let record = g.wait(&id);
    (
        id,
        PathBuf::from(record["worktree"].as_str().expect("worktree")),
    )
}

#[test]
fn rm_salvages_then_removes_a_kept_worktree() {
    let g = Grove::new();
    let (id, worktree) = kept_agent(&g);
    let work = leave_work(&worktree, "rm");
    let out = g.ok(&["rm", &id]);
    assert!(out.contains(&format!("grove/{id}")), "{out}");
    assert!(!worktree.exists());
    assert_work_on(&g, &format!("grove/{id}"), &work);
    let log = g.json(&["gc", "--log"]);
    let entry = each(&log, "removals")
        .find(|r| r["reason"] == "rm")
        .expect("rm logged");
    assert_eq!(entry["agent_id"], id.as_str());
    assert_eq!(entry["salvage_ref"], format!("grove/{id}").as_str());
    g.refused(&["rm", &id], "no worktree left");
}

#[test]
fn gc_prunes_idle_worktrees_after_a_dry_run_and_forgets_expired_records() {
    let g = Grove::new().with_env(&[("GROVE_MAX_IDLE", "1ms"), ("GROVE_RETENTION", "1ms")]);
    let (id, worktree) = kept_agent(&g);
    let work = leave_work(&worktree, "gc");
    let clean = g.spawn(&[], "true");
    g.wait(&clean);

    let dry = g.json(&["gc", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["removals"][0]["agent_id"], id.as_str());
    assert!(dry["removals"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .starts_with("prune: idle for"));
    assert_eq!(dry["records_deleted"], serde_json::json!([clean]));
    assert!(worktree.exists(), "a dry run removes nothing");
    assert_eq!(g.all_agents().len(), 2);

    let done = g.json(&["gc"]);
    assert_eq!(
        done["removals"][0]["salvage_ref"],
        format!("grove/{id}").as_str()
    );
    assert!(!worktree.exists());
    assert_work_on(&g, &format!("grove/{id}"), &work);
    // Retention counts from the end of an agent's life; with 1ms both records expire
    // once no worktree is left. Their branches stay: only the records go.
    let mut deleted: Vec<String> = each(&done, "records_deleted")
        .map(|v| v.as_str().expect("id").to_string())
        .collect();
    deleted.sort();
    let mut expected = vec![id.clone(), clean.clone()];
    expected.sort();
    assert_eq!(deleted, expected);
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    assert_work_on(&g, &format!("grove/{id}"), &work);
    assert!(!g.home.join("agents").join(&clean).exists());
}

#[test]
fn the_daily_prune_runs_by_itself() {
    let g = Grove::new().with_env(&[
        ("GROVE_MAX_IDLE", "1ms"),
        ("GROVE_PRUNE_FIRST_DELAY", "50ms"),
        ("GROVE_PRUNE_INTERVAL", "100ms"),
    ]);
    let (id, worktree) = kept_agent(&g);
    eventually("prune removes the idle worktree", LONG, || {
        !worktree.exists()
    });
    assert_eq!(g.agent_file(&id, "kept.txt"), "kept\n");
    // The removal is logged right after the worktree goes.
    eventually("prune logged", LONG, || {
        let log = g.json(&["gc", "--log"]);
        log["removals"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("prune")
    });
}

#[test]
fn startup_scan_reconciles_disk_git_and_processes() {
    let g = Grove::new();
    let pids = g.make_dir("pids");
    // A kept worktree whose lock a dead agent left behind.
    let (kept, kept_path) = kept_agent(&g);
    g.git(&[
        "worktree",
        "lock",
        "--reason",
        "grove agent gone",
        kept_path.to_str().expect("utf8"),
    ]);
    // An agent whose shim will die without an exit record.
    let doomed = g.spawn(
        &[],
        &format!(
            "echo $$ > '{}/group'; echo lost-work > lost.txt; sleep 300",
            pids.display()
        ),
    );
    eventually("doomed agent wrote", LONG, || pids.join("group").exists());
    let doomed_shim = g.record(&doomed)["pid"].as_i64().expect("pid") as i32;
    let repo_dir = kept_path.parent().expect("repo dir").to_path_buf();
    // An unknown worktree under the root, with work in it.
    let unknown = repo_dir.join("unknown");
    g.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "stray",
        unknown.to_str().expect("utf8"),
    ]);
    let unknown_work = leave_work(&unknown, "unknown");
    // Metadata whose directory was deleted by hand.
    let vanished = repo_dir.join("vanished");
    g.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        vanished.to_str().expect("utf8"),
    ]);
    fs::remove_dir_all(&vanished).expect("rm -rf");

    g.crash_daemon();
    let group = read_pid(&pids.join("group"));
    let _ = kill(Pid::from_raw(-group), Signal::SIGKILL);
    kill(Pid::from_raw(doomed_shim), Signal::SIGKILL).expect("kill -9 shim");
    eventually("shim gone", LONG, || !process_exists(doomed_shim));

    // The next command starts a daemon, which serves while it recovers and scans.
    let lost = g.wait(&doomed);
    eventually("the start-up scan to finish", LONG, || {
        g.json(&["daemon", "status"])["recovering"] == false
    });
    assert_eq!(lost["status"], "lost");
    assert_eq!(g.agent_file(&doomed, "lost.txt"), "lost-work\n");
    assert!(!Path::new(lost["worktree"].as_str().expect("wt")).exists());

    assert!(!unknown.exists());
    assert_work_on(&g, "refs/grove/salvage/unknown", &unknown_work);
    assert_eq!(
        g.git(&["rev-parse", "stray"]),
        g.git(&["rev-parse", "main"]),
        "salvage of an unknown worktree never moves its branch"
    );
    let salvaged = g.json(&["salvaged"]);
    assert_eq!(salvaged["refs"][0]["name"], "refs/grove/salvage/unknown");

    let porcelain = g.git(&["worktree", "list", "--porcelain"]);
    assert!(!porcelain.contains("vanished"), "{porcelain}");
    assert!(!porcelain.contains("locked"), "{porcelain}");
    // git and grove agree: the main checkout plus the kept worktree.
    let listed: Vec<String> = porcelain
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .map(String::from)
        .collect();
    assert_eq!(listed.len(), 2, "{porcelain}");
    assert_eq!(listed[1], g.record(&kept)["worktree"].as_str().expect("wt"));
    g.git(&["fsck", "--strict"]);
    let log = g.json(&["gc", "--log"]);
    let reasons: Vec<&str> = each(&log, "removals")
        .filter_map(|r| r["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("orphan at start-up")),
        "{reasons:?}"
    );
    assert!(reasons.contains(&"lost"), "{reasons:?}");

    // And the salvaged work comes back on request.
    let restored = g.json(&["restore", "unknown"]);
    let path = PathBuf::from(restored["worktree"].as_str().expect("path"));
    assert_eq!(
        fs::read(path.join("notes.bin")).expect("restored file"),
        unknown_work.1
    );
    assert_eq!(restored["branch"], "grove/restored-unknown");
}

#[test]
fn discarded_branches_stay_reachable_until_retention_passes() {
    let g = Grove::new().with_env(&[("GROVE_RETENTION", "1ms")]);
    let id = g.spawn(&[], "echo gone > gone.txt");
    g.wait(&id);
    g.ok(&["discard", &id, "--yes"]);
    let salvage_ref = format!("refs/grove/salvage/discarded-{id}");
    assert!(!g.git(&["rev-parse", &salvage_ref]).is_empty());
    let dry = g.json(&["gc", "--dry-run"]);
    assert_eq!(dry["refs_expired"], serde_json::json!([salvage_ref]));
    assert!(
        !g.git(&["rev-parse", &salvage_ref]).is_empty(),
        "a dry run keeps it"
    );
    let done = g.json(&["gc"]);
    assert_eq!(done["refs_expired"], serde_json::json!([salvage_ref]));
    assert_eq!(g.git(&["for-each-ref", "refs/grove/salvage/"]), "");
}

/// Removed worktrees' files set aside for the deleter, in the worktree root.
fn trash_dirs(g: &Grove) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for repo in fs::read_dir(g.worktree_root())
        .into_iter()
        .flatten()
        .flatten()
    {
        for entry in fs::read_dir(repo.path()).into_iter().flatten().flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(".grove-trash-")
            {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Issue 29, item 1: a collected worktree's files are deleted off every critical path.
/// With the deleter held, agents are still collected and spawned, the daemon stops at
/// once, and the next start deletes what was left.
#[test]
fn collects_and_spawns_never_wait_for_a_deletion() {
    let g = Grove::new();
    let release = g.files().join("release-deleter");
    let held = [
        ("GROVE_TEST_HOLD_AT", "deleting"),
        ("GROVE_TEST_HOLD_UNTIL", release.to_str().expect("utf-8")),
    ];
    let first = g.run_env(&["spawn", "--", "sh", "-c", "echo a > a.txt"], &held);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let first = first.stdout.trim().to_string();
    assert_eq!(g.wait(&first)["status"], "collected");
    eventually("the first checkout set aside", LONG, || {
        trash_dirs(&g).len() == 1
    });
    // The deleter is stuck on the first: the next agents are prepared and collected.
    let later: Vec<String> = (0..3)
        .map(|i| g.spawn(&[], &format!("echo {i} > n.txt")))
        .collect();
    for (i, id) in later.iter().enumerate() {
        assert_eq!(g.wait(id)["status"], "collected", "{id}");
        assert_eq!(g.agent_file(id, "n.txt"), format!("{i}\n"));
    }
    assert_eq!(g.agent_file(&first, "a.txt"), "a\n");
    // A stop does not wait for the deletions either; the next start does them.
    let daemon = g.daemon_pid();
    g.ok(&["daemon", "stop"]);
    assert!(!process_exists(daemon));
    assert!(
        !trash_dirs(&g).is_empty(),
        "the held deleter deleted something"
    );
    g.ok(&["list"]);
    eventually("the next start deletes what was set aside", LONG, || {
        trash_dirs(&g).is_empty()
    });
    g.assert_no_worktree_left();
}

/// Issue 29, item 4: on an empty database the start-up scan finds a worktree no record
/// owns while its agent still writes in it: it is kept, and said so, until that agent
/// has ended; then it is salvaged and removed.
#[test]
fn the_start_up_scan_keeps_an_unknown_worktree_whose_agent_still_runs() {
    let g = Grove::new();
    let gates = g.make_dir("gates");
    let script = format!(
        "echo started > started.txt; {}; echo late > late.txt",
        gate_script(&gates, "go")
    );
    let id = g.spawn(&[], &script);
    let worktree = PathBuf::from(g.record(&id)["worktree"].as_str().expect("worktree"));
    eventually("the agent started", LONG, || {
        worktree.join("started.txt").exists()
    });
    g.ok(&["daemon", "stop"]);
    for file in ["grove.db", "grove.db-wal", "grove.db-shm"] {
        let _ = fs::remove_file(g.home.join(file));
    }
    g.ok(&["list"]);
    eventually("the start-up scan is done", LONG, || {
        g.json(&["daemon", "status"])["recovering"] == false
    });
    assert!(
        worktree.join("started.txt").exists(),
        "the live agent's worktree was removed"
    );
    assert!(
        !g.daemon_log_lines("processes still run in it").is_empty(),
        "{}",
        g.daemon_log()
    );
    fs::write(gates.join("go"), "").expect("gate");
    eventually("the agent wrote its last file", LONG, || {
        worktree.join("late.txt").exists()
    });
    eventually("removed once its agent has ended", LONG, || {
        !worktree.exists()
    });
    let salvaged = g.git(&["for-each-ref", "--format=%(refname)", "refs/grove/salvage"]);
    let reference = salvaged.lines().next().expect("a salvage ref");
    assert_eq!(g.file_at(reference, "late.txt"), "late\n");
}

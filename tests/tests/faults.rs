//! Crashes at named points inside operations (GROVE_TEST_CRASH_AT), a full disk and a
//! damaged database or WAL: recovery leaves nothing half done and loses nothing
//! acknowledged, or says what was lost.

mod support;

use serde_json::json;
use std::fs;
use std::path::Path;
use std::time::Duration;
use support::*;

#[test]
fn a_crash_while_preparing_rolls_back_and_the_agent_starts_again() {
    for point in ["after_branch_create", "after_worktree_add"] {
        let g = Grove::new();
        g.crash_during(point, SPAWN_KEEPING_ENV);
        // The next daemon undoes the half preparation and starts the agent afresh.
        let agents = g.all_agents();
        assert_eq!(agents.len(), 1, "{point}: {agents:?}");
        let id = agents[0]["id"].as_str().expect("id").to_string();
        let record = g.wait(&id);
        assert_eq!(record["outcome"], "succeeded", "{point}: {record}");
        assert_eq!(g.agent_file(&id, "x.txt"), "kept\n", "{point}");
        g.assert_no_worktree_left();
        let branches = g.git(&["branch", "--list", "grove/*"]);
        assert_eq!(
            branches.lines().count(),
            1,
            "{point}: no stray branch: {branches}"
        );
    }
}

#[test]
fn a_crash_in_the_middle_of_salvage_is_finished_by_the_next_daemon() {
    let g = Grove::new();
    let id = g.crash_collecting("mid_salvage", &[], "echo work > work.txt");
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected");
    assert_eq!(record["salvaged"], true);
    assert_eq!(g.agent_file(&id, "work.txt"), "work\n");
    g.assert_no_worktree_left();
}

#[test]
fn a_crash_in_the_middle_of_a_state_commit_applies_nothing_of_the_batch() {
    let g = Grove::new();
    let schema = g.write_file("s.toml", "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"add\" }\nl = { reducer = \"append\" }\n");
    g.session_by_spawn("s", &schema);
    g.state_update("s", &["n", "1"]);
    g.ok(&["daemon", "stop"]);
    g.crash_during(
        "mid_state_commit",
        &[
            "state",
            "update",
            "--session",
            "s",
            "n",
            "5",
            "l",
            "[\"x\"]",
        ],
    );
    let state = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(state["state"], json!({"n": 1, "l": []}));
    assert_eq!(state["checkpoint"], 1);
    g.state_update("s", &["n", "2"]);
    assert_eq!(g.json(&["state", "get", "--session", "s"])["checkpoint"], 2);
}

#[test]
fn a_crash_in_the_middle_of_a_compaction_stores_none_of_it() {
    let g = Grove::new().with_env(&[("GROVE_CHECKPOINT_KEEP", "10")]);
    let schema = g.write_file(
        "s.toml",
        "[state]\nversion = 1\n[state.channels]\nn = { reducer = \"add\" }\n",
    );
    g.session_by_spawn("s", &schema);
    g.ok(&["daemon", "stop"]);
    // A daemon set to die in its first compaction, due once 10 + 64 checkpoints are
    // exceeded: it rides with the group of the 75th update, or alone in the next.
    let armed = [
        ("GROVE_TEST_CRASH_AT", "mid_compaction"),
        ("GROVE_RETRY_FOR", "0"),
    ];
    let first = g.run_env(&["state", "update", "--session", "s", "n", "1"], &armed);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // No retries: a retry would go on once the daemon is gone.
    let mut c = client(&g).retry_for(Duration::ZERO);
    let update = json!({"session": "s", "writes": [{"channel": "n", "value": 1}]});
    let mut acked = 1;
    while acked < 200 {
        match c.call_raw("state.update", update.clone()) {
            Ok(answer) if answer.error.is_none() => acked += 1,
            _ => break,
        }
    }
    assert!(
        (74..=75).contains(&acked),
        "the daemon died after {acked} updates"
    );
    drop(c);
    g.await_daemon_gone("the crashed daemon is gone", Duration::from_secs(10));
    // Every acknowledged update is stored; of the compaction, nothing is: the first
    // checkpoint still reads.
    let state = g.json(&["state", "get", "--session", "s"]);
    let head = state["checkpoint"].as_u64().expect("checkpoint");
    assert!(head >= acked && head <= 75, "{acked} acknowledged: {state}");
    assert_eq!(state["state"], json!({"n": head}));
    let at1 = g.json(&["state", "get", "--session", "s", "--at", "1"]);
    assert_eq!(at1["state"], json!({"n": 1}));
    // The next update brings the compaction again, and it holds.
    g.state_update("s", &["n", "1"]);
    let oldest = head + 1 - 10 + 1;
    let shown = g.json(&["session", "show", "s"]);
    assert_eq!(shown["oldest"], oldest, "{shown}");
    let gone = g.run(&["state", "get", "--session", "s", "--at", "1"]);
    assert!(gone.stderr.contains("compacted away"), "{}", gone.stderr);
    let at_oldest = g.json(&[
        "state",
        "get",
        "--session",
        "s",
        "--at",
        &oldest.to_string(),
    ]);
    assert_eq!(at_oldest["state"], json!({"n": oldest}));
    let now = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(now["state"], json!({"n": head + 1}));
}

/// A 16 MiB tmpfs for grove's state directory; none where it cannot be mounted.
fn small_home(prefix: &str) -> Option<(tempfile::TempDir, Tmpfs, std::path::PathBuf)> {
    small_fs(prefix, "hf", 16)
}

/// Fills the filesystem at `dir` to the last byte; returns the filler's path.
fn fill_up(dir: &Path) -> std::path::PathBuf {
    let filler = dir.join("filler");
    let mut file = fs::File::create(&filler).expect("filler");
    let chunk = vec![1u8; 1 << 16];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    let _ = std::io::Write::write_all(&mut file, &[1u8]);
    filler
}

#[test]
fn a_full_disk_fails_spawns_and_state_writes_cleanly() {
    let scratch = short_temp_dir("ge");
    let root = scratch.path().join("wt");
    let home_fs = scratch.path().join("hf");
    let (_wt, _home) = match (Tmpfs::mount(&root, 16), Tmpfs::mount(&home_fs, 16)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => {
            can_run("tmpfs", Some(why));
            return;
        }
    };
    let mut g = Grove::new().with_env(&[
        ("GROVE_WORKTREE_ROOT", root.to_str().expect("utf8")),
        // Pressure handling would refuse before git could fail; this test wants ENOSPC.
        ("GROVE_DISK_HIGH", "100"),
        ("GROVE_DISK_LOW", "99"),
    ]);
    g.home = home_fs.join("h");
    let schema = g.write_file(
        "s.toml",
        "[state]\nversion = 1\n[state.channels]\nl = { reducer = \"append\" }\n",
    );
    g.session_by_spawn("s", &schema);
    g.state_update("s", &["l", "[\"before\"]"]);

    // Worktree root full: git cannot check out; nothing half made is left.
    let filler = fill_up(&root);
    g.fails(&["spawn", "--", "true"], &["git worktree add"]);
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
    assert_eq!(g.all_agents().len(), 1);
    fs::remove_file(filler).expect("free");

    // State directory full: the write is refused, the database stays whole.
    let big = "x".repeat(64 * 1024);
    let filler = fill_up(&home_fs);
    let value = format!("[\"{big}\"]");
    let mut refused = false;
    for _ in 0..64 {
        let out = g.run(&["state", "update", "--session", "s", "l", &value]);
        if out.code != 0 {
            refused = true;
            break;
        }
    }
    assert!(refused, "a full disk never refused a write");
    g.ok(&["daemon", "status"]);
    fs::remove_file(filler).expect("free");
    let after = g.json(&["state", "get", "--session", "s"]);
    let items = after["state"]["l"].as_array().expect("list").clone();
    assert_eq!(items[0], "before");
    let checkpoint = after["checkpoint"].as_u64().expect("checkpoint");
    assert_eq!(
        items.len() as u64,
        checkpoint,
        "every acknowledged batch, nothing else"
    );
    g.state_update("s", &["l", "[\"after\"]"]);
    let db = g.stopped_db();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("check");
    assert_eq!(check, "ok");
}

/// Starts a daemon, then `grove spawn -- true` in the background without retries: a
/// retried spawn would start the next daemon, whose own (living) git would run through
/// the test's git wrapper too.
fn spawn_that_dies_with_the_daemon(g: &Grove) -> std::process::Child {
    g.ok(&["list"]);
    g.command()
        .args(["spawn", "--", "true"])
        .env("GROVE_RETRY_FOR", "0")
        .spawn()
        .expect("spawn")
}

/// A git the daemon started dies with it (issue 20): here `git worktree add` waits
/// three seconds behind a wrapper, the daemon is SIGKILLed meanwhile, and the wrapper
/// never gets to run the real git on grove's paths.
#[test]
fn a_git_of_a_killed_daemon_dies_with_it() {
    let g = Grove::new();
    let marks = g.make_dir("marks");
    let g = g.with_git_wrapper(&format!(
        "case \"$*\" in *'worktree add'*)\n  echo $$ > {m}/wrapper.pid\n  sleep 3 & echo $! > {m}/sleep.pid; wait\n  echo ran > {m}/git-ran;;\nesac",
        m = marks.display(),
    ));
    let mut spawn = spawn_that_dies_with_the_daemon(&g);
    let pid_of = |name: &str| -> Option<i32> {
        fs::read_to_string(marks.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    eventually("git worktree add started", Duration::from_secs(20), || {
        pid_of("sleep.pid").is_some()
    });
    let wrapper = pid_of("wrapper.pid").expect("wrapper pid");
    let sleeper = pid_of("sleep.pid").expect("sleep pid");
    g.crash_daemon();
    let _ = spawn.wait();
    eventually("the daemon's git is gone", Duration::from_secs(5), || {
        !process_exists(wrapper)
    });
    // The wrapper's own timer runs out; had the wrapper lived, git would have run then.
    eventually(
        "the wrapper's timer ran out",
        Duration::from_secs(10),
        || !process_exists(sleeper),
    );
    assert!(!marks.join("git-ran").exists(), "git ran for a dead daemon");
}

/// `g` with a git whose first `worktree add` leaves a helper behind: it writes its pid
/// to `<marks>/helper.pid`, sleeps a minute, then would write `<marks>/late`.
fn leaving_a_git_helper(g: Grove) -> (Grove, std::path::PathBuf) {
    let marks = g.make_dir("marks");
    let helper = format!(
        "echo $$ > {m}/helper.tmp; mv {m}/helper.tmp {m}/helper.pid; sleep 60; echo late > {m}/late",
        m = marks.display()
    );
    let g = g.with_git_wrapper(&format!(
        "case \"$*\" in *'worktree add'*)\n  if [ ! -e {m}/helper.pid ]; then sh -c '{helper}' & fi;;\nesac",
        m = marks.display(),
    ));
    (g, marks)
}

/// What git itself starts (`git worktree add` runs `git reset --hard`, which runs
/// `checkout--worker`s) escapes the parent-death signal of the git the daemon started.
/// Here the first `git worktree add` leaves a helper behind that would write into
/// grove's paths after a long sleep; it shares git's cgroup, which the daemon's reaper
/// kills the moment the daemon is killed (issue 29, item 8).
#[test]
fn a_git_helper_dies_with_a_killed_daemon() {
    let g = Grove::new();
    let (g, marks) = leaving_a_git_helper(g);
    if !grove_sys::cgroup::usable() {
        can_run("cgroup", Some("no cgroup v2 to put git in".into()));
        return;
    }
    let mut spawn = spawn_that_dies_with_the_daemon(&g);
    let helper = read_pid(&marks.join("helper.pid"));
    g.crash_daemon();
    let _ = spawn.wait();
    eventually(
        "the helper died with the daemon",
        Duration::from_secs(1),
        || !process_exists(helper),
    );
    g.ok(&["list"]);
    assert!(!marks.join("late").exists());
}

/// Where git cannot get a cgroup of its own (here: `cgroup = false`), the next daemon
/// kills such a helper before it touches anything (issue 20), found by the daemon's
/// mark; once the restarted daemon answers, the helper is gone.
#[test]
fn a_git_helper_of_a_killed_daemon_is_killed_before_the_next_daemon_starts() {
    let g = Grove::new().with_env(&[("GROVE_CGROUP", "false")]);
    let (g, marks) = leaving_a_git_helper(g);
    let mut spawn = spawn_that_dies_with_the_daemon(&g);
    let helper = read_pid(&marks.join("helper.pid"));
    g.crash_daemon();
    let _ = spawn.wait();
    assert!(
        process_exists(helper),
        "the helper died with the daemon: this test shows nothing"
    );
    g.ok(&["list"]);
    assert!(
        !process_exists(helper),
        "a git helper of the killed daemon still runs after the next daemon answered"
    );
    assert!(!marks.join("late").exists());
    assert_eq!(
        g.daemon_log_lines("killed git processes a crashed daemon left running")
            .len(),
        1,
        "{}",
        g.daemon_log()
    );
}

/// A stale trash directory of an earlier removal of the same worktree (its deletion
/// interrupted) does not stop this removal (issue 20: "Directory not empty").
#[test]
fn a_stale_trash_directory_does_not_stop_a_removal() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "", "");
    let worktree = std::path::PathBuf::from(g.record(&id)["worktree"].as_str().expect("wt"));
    let stale = worktree.with_file_name(format!(".grove-trash-{id}"));
    fs::create_dir_all(stale.join("left")).expect("stale trash");
    fs::write(stale.join("left/file"), "x").expect("write");
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert_eq!(record["status"], "collected", "{record}");
    assert!(record["error"].is_null(), "{record}");
    assert!(!worktree.exists());
}

/// A restart with a backlog (20 preparations a crash interrupted, 20 agents that ended
/// while no daemon ran) answers at once: recovery runs after the socket opens. The
/// rollbacks are held until a gate file appears, so the first answer is seen while the
/// recovery is provably unfinished; then everything completes, each agent exactly once.
#[test]
fn a_restart_with_a_backlog_answers_before_its_recovery_is_done() {
    const BACKLOG: usize = 20;
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "60")]);
    let runs = g.make_dir("runs");
    let gate = g.dir.path().join("gate");
    let count = format!("echo run >> '{}'/$GROVE_AGENT_ID", runs.display());
    let ended: Vec<String> = (0..BACKLOG)
        .map(|_| {
            let script = format!(
                "{count}; while [ ! -e '{}' ]; do sleep 0.02; done; echo done > out.txt",
                gate.display()
            );
            g.spawn(&[], &script)
        })
        .collect();
    let begun = std::time::Instant::now();
    g.ok(&["daemon", "restart"]);
    g.json(&["daemon", "status"]);
    let unburdened = begun.elapsed();
    // A daemon whose preparations stop after the worktree is added; 20 of them pile up.
    g.ok(&["daemon", "stop"]);
    let held = [
        ("GROVE_TEST_HOLD_AT", "prepared_worktree"),
        ("GROVE_RETRY_FOR", "0"),
    ];
    assert_eq!(g.run_env(&["list"], &held).code, 0);
    let spawns: Vec<_> = (0..BACKLOG)
        .map(|_| {
            let mut command = g.command();
            command.args([
                "spawn",
                "--",
                "sh",
                "-c",
                &format!("{count}; echo x > x.txt"),
            ]);
            command.envs(held).stdout(std::process::Stdio::null());
            command.stderr(std::process::Stdio::null());
            command.spawn().expect("spawn client")
        })
        .collect();
    eventually("20 preparations held", Duration::from_secs(60), || {
        let agents = g.json(&["list"])["agents"].clone();
        let preparing = agents.as_array().map_or(0, |a| {
            a.iter().filter(|r| r["status"] == "preparing").count()
        });
        preparing == BACKLOG
    });
    g.crash_daemon();
    for mut spawn in spawns {
        let _ = spawn.wait();
    }
    fs::write(&gate, "").expect("gate");
    eventually("the 20 agents ended", Duration::from_secs(30), || {
        ended
            .iter()
            .all(|id| g.home.join("agents").join(id).join("exit.json").exists())
    });

    let rollbacks = g.dir.path().join("rollbacks may go");
    let hold = rollbacks.to_str().expect("utf8");
    let begun = std::time::Instant::now();
    let restart = g.run_env(
        &["daemon", "restart"],
        &[
            ("GROVE_TEST_HOLD_AT", "rolling_back"),
            ("GROVE_TEST_HOLD_UNTIL", hold),
        ],
    );
    assert_eq!(restart.code, 0, "{}", restart.stderr);
    let status = g.json(&["daemon", "status"]);
    eprintln!(
        "restart with {BACKLOG} interrupted preparations and {BACKLOG} ended agents: \
         first status answer {} ms after `grove daemon restart` began (without a \
         backlog: {} ms)",
        begun.elapsed().as_millis(),
        unburdened.as_millis()
    );
    assert_eq!(status["recovering"], true, "{status}");
    assert!(
        status["recovery_pending"].as_u64() >= Some(BACKLOG as u64),
        "{status}"
    );
    // Requests that need no recovery are answered meanwhile.
    assert_eq!(g.all_agents().len(), 2 * BACKLOG);
    fs::write(&rollbacks, "").expect("gate");

    let all = g.json(&["list", "--all"])["agents"].clone();
    let ids: Vec<&str> = all
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    let mut args = vec!["wait"];
    args.extend(&ids);
    let done = g.json(&args);
    for agent in done["agents"].as_array().expect("agents") {
        assert_eq!(agent["status"], "collected", "{agent}");
        assert_eq!(agent["outcome"], "succeeded", "{agent}");
    }
    for id in &ids {
        let counted = fs::read_to_string(runs.join(id)).unwrap_or_default();
        assert_eq!(
            counted.lines().count(),
            1,
            "agent {id} ran once: {counted:?}"
        );
    }
    eventually("recovery done", Duration::from_secs(30), || {
        g.json(&["daemon", "status"])["recovering"] == false
    });
    g.assert_no_worktree_left();
}

/// An agent that exits normally while the disk holding grove's state is full keeps its
/// outcome (issue 20): its shim reserved the exit record's room when it started, so the
/// record is written and the agent is not taken for `lost`.
#[test]
fn a_normal_exit_on_a_full_disk_keeps_its_outcome() {
    let Some((_scratch, _home, home_fs)) = small_home("ge") else {
        return;
    };
    let mut g = Grove::new().with_env(&[("GROVE_DISK_HIGH", "100"), ("GROVE_DISK_LOW", "99")]);
    g.home = home_fs.join("h");
    let gate = g.dir.path().join("gate");
    let started = g.dir.path().join("started");
    let id = g.spawn(
        &[],
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
            started.display(),
            gate.display()
        ),
    );
    // The command runs: its shim is past the start, where it reserves the room.
    eventually("the agent runs", Duration::from_secs(10), || {
        started.exists()
    });
    let filler = fill_up(&home_fs);
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    fs::remove_file(filler).expect("free");
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert_eq!(g.record(&id)["outcome"], "succeeded");
}

/// A restart that cannot write the abandon marker of an interrupted start does not roll
/// it back (a shim of that start could still claim it and run the agent in a worktree
/// being removed): it keeps the agent `preparing` and tries again, and once the marker
/// is written the agent starts afresh, once.
#[test]
fn an_abandon_marker_that_cannot_be_written_holds_the_rollback_until_it_can() {
    let g = Grove::new();
    let runs = g.dir.path().join("runs");
    g.crash_during(
        "after_worktree_add",
        &[
            "spawn",
            "--",
            "sh",
            "-c",
            &format!("echo run >> '{}'", runs.display()),
        ],
    );
    let agent_dirs: Vec<_> = fs::read_dir(g.home.join("agents"))
        .expect("agents")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(agent_dirs.len(), 1, "{agent_dirs:?}");
    // A directory where the marker goes: writing the marker fails.
    let marker = agent_dirs[0].join("start-1.abandon");
    fs::create_dir(&marker).expect("block the marker");
    g.ok(&["list"]);
    eventually("the failure is said", Duration::from_secs(10), || {
        !g.daemon_log_lines("cannot mark an interrupted start as given up")
            .is_empty()
    });
    let id = g.json(&["list", "--all"])["agents"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(g.status(&id), "preparing");
    assert_eq!(g.json(&["daemon", "status"])["recovery_pending"], 1);
    assert_eq!(g.worktree_dirs().len(), 1, "no rollback without the marker");
    fs::remove_dir(&marker).expect("unblock the marker");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert_eq!(
        fs::read_to_string(&runs).unwrap_or_default(),
        "run\n",
        "the agent ran once"
    );
}

// A damaged database or log (issue 29, item 3). SQLite reads a log only up to its first
// bad frame and says nothing of the rest; grove reads it first and refuses to serve
// from it until `grove daemon recover` has kept a copy and brought back what is
// readable.

const WAL_HEADER: u64 = 32;

/// The session `s` (a counter) with `updates` acknowledged updates more, each its own
/// transaction of a few frames.
fn acknowledge(g: &Grove, updates: u64) {
    let mut c = client(g);
    if call(&mut c, "session.show", json!({"name": "s"})).is_err() {
        create_session(&mut c, "s", COUNTER_SCHEMA);
    }
    let update = json!({"session": "s", "writes": [{"channel": "count", "value": 1}]});
    for n in 0..updates {
        call(&mut c, "state.update", update.clone())
            .unwrap_or_else(|e| panic!("update {n}: {e:?}"));
    }
}

/// [`acknowledge`], then the daemon killed -9 with the updates in its log (far below
/// SQLite's autocheckpoint at 1000 frames until a test asks for more).
fn acknowledged_then_killed(g: &Grove, updates: u64) {
    acknowledge(g, updates);
    g.crash_daemon();
}

fn wal(g: &Grove) -> std::path::PathBuf {
    g.home.join("grove.db-wal")
}

fn wal_word(g: &Grove, at: usize) -> u64 {
    let bytes = fs::read(wal(g)).expect("read the log");
    u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as u64
}

/// The size of one frame of the log: its page size (header, offset 8) and 24 bytes.
fn frame_size(g: &Grove) -> u64 {
    wal_word(g, 8) + 24
}

/// Where frame `n` (from 1) of the log starts.
fn frame_at(g: &Grove, n: u64) -> u64 {
    WAL_HEADER + (n - 1) * frame_size(g)
}

fn whole_frames(g: &Grove) -> u64 {
    (fs::metadata(wal(g)).expect("log").len() - WAL_HEADER) / frame_size(g)
}

fn cut_wal(g: &Grove, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(wal(g))
        .and_then(|f| f.set_len(len))
        .expect("cut the log");
}

fn overwrite_wal(g: &Grove, at: u64, len: usize) {
    use std::io::{Seek, SeekFrom, Write};
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8 ^ 0xa5).collect();
    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(wal(g))
        .expect("open");
    file.seek(SeekFrom::Start(at)).expect("seek");
    file.write_all(&garbage).expect("overwrite");
}

/// The next command cannot start a daemon: it says once what is damaged (`said`) and
/// what to do, and so does the daemon's log.
fn refused_for(g: &Grove, said: &str, needles: &[&str]) {
    let out = g.run(&["list"]);
    assert_ne!(out.code, 0, "a daemon served: {}", out.stdout);
    assert_eq!(out.stderr.matches(said).count(), 1, "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("grove daemon recover").count(),
        1,
        "{}",
        out.stderr
    );
    for needle in needles {
        assert!(out.stderr.contains(needle), "{needle:?} in {}", out.stderr);
    }
    assert!(!out.stderr.contains("Error code"), "{}", out.stderr);
    assert!(!g.daemon_log_lines(said).is_empty(), "{}", g.daemon_log());
}

fn doctor_database(g: &Grove) -> (i32, serde_json::Value) {
    let out = g.run(&["--json", "doctor"]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("doctor JSON");
    (out.code, doctor_check(&report, "database"))
}

fn assert_doctor_names(g: &Grove, needles: &[&str]) {
    let (code, database) = doctor_database(g);
    assert_eq!(code, 1, "{database}");
    assert_eq!(database["status"], "fail", "{database}");
    for needle in needles.iter().chain(&["grove daemon recover"]) {
        let message = database["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{needle:?} in {database}");
    }
}

/// `grove daemon recover` keeps copies of the damaged files (of the size they had),
/// says what was lost, and starts a daemon that serves the readable state.
fn recover(g: &Grove, says: &str) -> u64 {
    let damaged_wal = fs::metadata(wal(g)).map(|m| m.len()).ok();
    let out = g.run(&["daemon", "recover"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains(says), "{says:?} in {}", out.stdout);
    assert!(out.stdout.contains("started (pid"), "{}", out.stdout);
    let kept: Vec<_> = fs::read_dir(&g.home)
        .expect("state dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".damaged-"))
        .collect();
    let named = |prefix: &str| {
        kept.iter()
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .unwrap_or_else(|| panic!("no copy {prefix}* in {kept:?}"))
    };
    named("grove.db.damaged-");
    if let Some(len) = damaged_wal {
        let copy = named("grove.db-wal.damaged-");
        assert_eq!(fs::metadata(copy).expect("copy").len(), len);
    }
    let (code, database) = doctor_database(g);
    assert_eq!((code, &database["status"]), (0, &json!("ok")), "{database}");
    let state = g.json(&["state", "get", "--session", "s"]);
    let head = state["checkpoint"].as_u64().expect("checkpoint");
    // What is left is consistent: every checkpoint kept holds its update.
    assert_eq!(state["state"], json!({ "count": head }), "{state}");
    head
}

#[test]
fn a_wal_cut_inside_a_frame_is_refused_until_recovered() {
    let g = Grove::new();
    acknowledged_then_killed(&g, 100);
    let frames = whole_frames(&g);
    cut_wal(&g, frame_at(&g, frames / 2) + 1000);
    refused_for(&g, "grove.db-wal is damaged", &["cut short"]);
    assert_doctor_names(&g, &["grove.db-wal", "cut short"]);
    let head = recover(&g, "cut short");
    assert!(head > 0 && head < 100, "{head} of 100 updates kept");
    g.state_update("s", &["count", "1"]);
    let state = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(state["state"], json!({ "count": head + 1 }), "{state}");
}

#[test]
fn garbage_in_the_wal_is_refused_and_recovery_adopts_the_running_agent() {
    let g = Grove::new();
    // An agent that outlives the daemon: its records come before the damage.
    let (id, gate) = running_gated(&g);
    acknowledged_then_killed(&g, 100);
    let frames = whole_frames(&g);
    overwrite_wal(&g, frame_at(&g, frames / 2) + 100, 8192);
    refused_for(&g, "grove.db-wal is damaged", &["intact commits follow it"]);
    assert_doctor_names(&g, &["grove.db-wal", "intact commits follow it"]);
    recovered_and_adopted(&g, &id, &gate);
}

/// An agent spawned behind a gate, once it runs: its id and its gate.
fn running_gated(g: &Grove) -> (String, std::path::PathBuf) {
    let (id, gate) = g.spawn_gated(&[], "", "echo done > done.txt");
    eventually("the agent runs", Duration::from_secs(30), || {
        g.status(&id) == "running"
    });
    (id, gate)
}

/// `grove daemon recover` of a damaged log keeps part of 100 updates, and the gated
/// agent that ran all along is adopted and does its work.
fn recovered_and_adopted(g: &Grove, id: &str, gate: &Path) {
    let head = recover(g, "committed transactions");
    assert!(head > 0 && head < 100, "{head} of 100 updates kept");
    assert_eq!(g.status(id), "running", "adopted: {}", g.record(id));
    fs::write(gate, "").expect("gate");
    assert_eq!(g.wait(id)["outcome"], "succeeded");
    assert_eq!(g.agent_file(id, "done.txt"), "done\n");
}

/// Damage to the log under a running daemon: its mark reads the changed log within
/// seconds, and the daemon stops rather than go on serving from a store that lost
/// acknowledged writes, without sealing the file or recording a clean stop. The next
/// start refuses the same damage; recovery adopts the agent that kept running.
#[test]
fn damage_under_the_running_daemon_stops_it_and_the_next_start_refuses_it() {
    let g = Grove::new();
    let (id, gate) = running_gated(&g);
    acknowledge(&g, 100);
    let daemon = g.daemon_pid();
    let frames = whole_frames(&g);
    overwrite_wal(&g, frame_at(&g, frames / 2) + 100, 8192);
    eventually("the daemon stops", Duration::from_secs(30), || {
        !process_exists(daemon)
    });
    assert!(
        !g.daemon_log_lines("it stops now so as not to serve from it")
            .is_empty(),
        "{}",
        g.daemon_log()
    );
    assert!(
        !g.home.join("grove.db-sealed").exists(),
        "a damaged file was sealed"
    );
    refused_for(&g, "grove.db-wal is damaged", &["intact commits follow it"]);
    recovered_and_adopted(&g, &id, &gate);
}

/// A log cut exactly between two frames reads as a crash to anyone but the daemon that
/// saw the frames: its mark of the log says how many there were.
#[test]
fn a_wal_that_lost_whole_frames_is_refused_by_the_daemons_mark() {
    let g = Grove::new();
    acknowledge(&g, 100);
    // The daemon marks its log within seconds of a change; a mark written after the
    // log's last change counts all its frames.
    let mark = g.home.join("grove.db-mark");
    let modified = |path: &Path| fs::metadata(path).and_then(|m| m.modified()).ok();
    eventually("the daemon marks its log", Duration::from_secs(30), || {
        modified(&mark).is_some_and(|marked| Some(marked) >= modified(&wal(&g)))
    });
    g.crash_daemon();
    // Whole frames gone: the log alone reads like one a crash left.
    cut_wal(&g, frame_at(&g, whole_frames(&g) / 2));
    refused_for(&g, "grove.db-wal went backwards", &["the daemon saw"]);
    assert_doctor_names(&g, &["grove.db-wal went backwards"]);
    let head = recover(&g, "went backwards");
    assert!(head > 0 && head < 100, "{head} of 100 updates kept");
}

#[test]
fn a_malformed_database_is_refused_once_with_advice() {
    let g = Grove::new();
    acknowledge(&g, 3);
    // Everything in the database file and no log: the damage is the file's alone.
    let conn = g.stopped_db();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(conn);
    assert!(!wal(&g).exists());
    let db = g.home.join("grove.db");
    let mut bytes = fs::read(&db).expect("db");
    bytes[..100].copy_from_slice(&[0x5a; 100]);
    fs::write(&db, &bytes).expect("damage the database");
    refused_for(&g, "grove.db is damaged", &["file is not a database"]);
    assert_doctor_names(&g, &["grove.db is damaged"]);
    let out = g.run(&["daemon", "recover"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("could not be read whole"),
        "{}",
        out.stdout
    );
    g.ok(&["list", "--all"]);
}

/// A kill -9 leaves a log SQLite reads whole, also after a checkpoint started the log
/// again over older frames: none of that is damage.
#[test]
fn a_killed_daemons_wal_is_not_called_damaged() {
    let g = Grove::new();
    acknowledged_then_killed(&g, 30);
    assert!(whole_frames(&g) > 30);
    let (code, database) = doctor_database(&g);
    assert_eq!((code, &database["status"]), (0, &json!("ok")), "{database}");
    assert_eq!(
        g.json(&["state", "get", "--session", "s"])["state"],
        json!({"count": 30})
    );
    // Enough frames for SQLite's checkpoint (1000), which starts the log again with new
    // salts (its checkpoint count goes up) over the frames of the old ones.
    acknowledged_then_killed(&g, 400);
    assert!(wal_word(&g, 12) >= 1, "a checkpoint started the log again");
    let (code, database) = doctor_database(&g);
    assert_eq!((code, &database["status"]), (0, &json!("ok")), "{database}");
    let state = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(state["state"], json!({"count": 430}), "{state}");
}

/// SQLite leaves what it could write of a frame when the disk fills up in the middle of
/// it: a log ending inside a frame, like a cut one. The daemon notes its own failed
/// write, so that a kill before the next commit covers it is not called damage.
#[test]
fn a_frame_cut_short_by_a_full_disk_is_not_called_damage_after_a_kill() {
    let Some((_scratch, _home, home_fs)) = small_home("gw") else {
        return;
    };
    let mut g = Grove::new();
    g.home = home_fs.join("h");
    acknowledge(&g, 5);
    let mut c = client(&g);
    let list = "[state]\nversion = 1\n[state.channels]\nl = { reducer = \"append\" }\n";
    create_session(&mut c, "l", list);
    let filler = fill_up(&home_fs);
    let big =
        json!({"session": "l", "writes": [{"channel": "l", "value": ["x".repeat(64 * 1024)]}]});
    let refused = (0..64).find_map(|_| call(&mut c, "state.update", big.clone()).err());
    let refused = refused.expect("a full disk never refused a write");
    assert!(refused.message.contains("could not store"), "{refused:?}");
    drop(c);
    let rest = (fs::metadata(wal(&g)).expect("log").len() - WAL_HEADER) % frame_size(&g);
    assert_ne!(
        rest, 0,
        "the refused write left no frame cut short: nothing to test"
    );
    g.crash_daemon();
    fs::remove_file(filler).expect("free");
    let (code, database) = doctor_database(&g);
    assert_eq!(
        (code, &database["status"]),
        (0, &json!("ok")),
        "{rest}: {database}"
    );
    let state = g.json(&["state", "get", "--session", "s"]);
    assert_eq!(state["state"], json!({"count": 5}), "{state}");
}

/// A client riding out a restart stops as soon as the next daemon refuses a damaged
/// database, instead of retrying for `GROVE_RETRY_FOR` (300 s): exit 5, the refusal
/// said once.
#[test]
fn a_client_riding_out_a_restart_stops_at_a_damaged_database() {
    use std::io::BufRead;
    let g = Grove::new();
    acknowledge(&g, 100);
    let mut watch = g.command();
    watch
        .args(["--json", "state", "watch", "--session", "s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut watching = watch.spawn().expect("grove state watch");
    let mut lines = std::io::BufReader::new(watching.stdout.take().expect("stdout")).lines();
    lines.next().expect("first line").expect("read");
    // Held still until the damage is done, so that it cannot reconnect before.
    let watcher = nix::unistd::Pid::from_raw(watching.id() as i32);
    nix::sys::signal::kill(watcher, nix::sys::signal::Signal::SIGSTOP).expect("stop");
    g.crash_daemon();
    let frames = whole_frames(&g);
    cut_wal(&g, frame_at(&g, frames / 2) + 1000);
    nix::sys::signal::kill(watcher, nix::sys::signal::Signal::SIGCONT).expect("cont");
    eventually("the watcher gave up", Duration::from_secs(30), || {
        watching.try_wait().ok().flatten().is_some()
    });
    let out = watching.wait_with_output().expect("watcher");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(
        stderr.matches("grove daemon recover").count(),
        1,
        "{stderr}"
    );
}

/// Issue 29, item 2: output a headless agent writes while grove's disk is full is not
/// dropped silently: once space comes back, its log says how many bytes are missing
/// where they were, between what was saved before and after.
#[test]
fn output_written_while_the_disk_is_full_is_a_gap_of_known_size_in_the_log() {
    let Some((_scratch, _home, home_fs)) = small_home("gg") else {
        return;
    };
    let mut g = Grove::new().with_env(&[("GROVE_DISK_HIGH", "100"), ("GROVE_DISK_LOW", "99")]);
    g.home = home_fs.join("h");
    let (full, during, freed) = (
        g.dir.path().join("full"),
        g.dir.path().join("during"),
        g.dir.path().join("freed"),
    );
    let wait_for =
        |file: &Path| format!("while [ ! -e '{}' ]; do sleep 0.02; done", file.display());
    let script = format!(
        "echo saved-before; {}; i=0; while [ $i -lt 1000 ]; do echo lost-line-$i; i=$((i+1)); \
         done; touch '{}'; {}; echo saved-after",
        wait_for(&full),
        during.display(),
        wait_for(&freed)
    );
    let id = g.spawn(&[], &script);
    eventually("the first line is saved", Duration::from_secs(10), || {
        g.run(&["logs", &id]).stdout.contains("saved-before")
    });
    let filler = fill_up(&home_fs);
    fs::write(&full, "").expect("gate");
    eventually(
        "the agent wrote while the disk was full",
        Duration::from_secs(10),
        || during.exists(),
    );
    fs::remove_file(filler).expect("free");
    fs::write(&freed, "").expect("gate");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    let log = g.ok(&["logs", &id]);
    let (before, rest) = log.split_once("saved-before").expect("first line");
    let gap = rest.find("bytes of output are missing here");
    let after = rest.find("saved-after");
    assert!(
        gap.is_some() && after.is_some() && gap < after && before.is_empty(),
        "no gap line between the saved lines:\n{log}"
    );
    // 1000 lines of `lost-line-N\n` (12 to 14 bytes), more than the page the log
    // already had can take: what the gap lines say is missing is the rest of them.
    let lost = 10 * 12 + 90 * 13 + 900 * 14;
    let said: usize = rest
        .split("[grove: ")
        .skip(1)
        .filter_map(|s| s.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(
        said > 0 && said <= lost,
        "said {said} of {lost} bytes missing:\n{log}"
    );
}

/// A record the daemon could not save (its disk full) is never dropped (issue 33): the
/// agent's report is answered "not saved yet", and once space comes back the database
/// holds the report without anything else happening.
#[test]
fn a_record_that_could_not_be_saved_is_saved_once_space_comes_back() {
    let Some((_scratch, _home, home_fs)) = small_home("gs") else {
        return;
    };
    let mut g = Grove::new().with_env(&[("GROVE_DISK_HIGH", "100"), ("GROVE_DISK_LOW", "99")]);
    g.home = home_fs.join("h");
    let out = g.make_dir("out");
    let gate = g.dir.path().join("gate");
    let script = format!(
        r#"while [ ! -e '{gate}' ]; do sleep 0.02; done
big=$(head -c 60000 /dev/zero | tr '\0' x)
i=0
while [ $i -lt 64 ]; do
  i=$((i+1))
  if ! "$GROVE_BIN" report "$i $big" 2> '{out}/said'; then echo $i > '{out}/failed'; break; fi
done
touch '{out}/done'
while [ ! -e '{gate}.end' ]; do sleep 0.02; done"#,
        gate = gate.display(),
        out = out.display(),
    );
    let bin = format!("GROVE_BIN={BIN}");
    let id = g.spawn(&["--env", &bin], &script);
    let filler = fill_up(&home_fs);
    fs::write(&gate, "").expect("gate");
    eventually("the reports to end", Duration::from_secs(60), || {
        out.join("done").exists()
    });
    let failed =
        fs::read_to_string(out.join("failed")).expect("a full disk never refused a report");
    let said = fs::read_to_string(out.join("said")).expect("said");
    assert!(said.contains("could not be saved yet"), "{said}");
    fs::remove_file(filler).expect("free");
    let wanted = format!("{} x", failed.trim());
    eventually("the report to be saved", Duration::from_secs(120), || {
        stored_report(&g, &id).is_some_and(|report| report.starts_with(&wanted))
    });
    fs::write(format!("{}.end", gate.display()), "").expect("gate");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
}

/// The report in the agent's record as the database holds it now.
fn stored_report(g: &Grove, id: &str) -> Option<String> {
    let db = rusqlite::Connection::open_with_flags(
        g.home.join("grove.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    let record: String = db
        .query_row("SELECT record FROM agents WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .ok()?;
    let record: serde_json::Value = serde_json::from_str(&record).ok()?;
    record["report"].as_str().map(str::to_string)
}

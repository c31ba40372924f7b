//! Fault injection: a busy multi-agent workload (25 agents, cap 20, each writing files
//! and state) while the daemon is killed with SIGKILL at random moments, at least 20
//! times, and restarted each time. Set GROVE_TEST_SEED to replay a run.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::collections::HashSet;
use std::fs;
use std::time::Duration;
use support::*;

/// xorshift64*: a seeded generator, so a failing run can be replayed exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

const AGENT: &str = r#"
for i in 1 2 3 4 5 6 7 8; do
  printf '%s round %s\n' "$GROVE_AGENT_ID" "$i" > "work-$i.txt"
  until "$GROVE_BIN" state update items "[\"$GROVE_AGENT_ID-$i\"]" >/dev/null 2>&1; do sleep 0.05; done
  echo "$GROVE_AGENT_ID-$i" >> acked.txt
  sleep 0.1
done
"#;

#[test]
fn twenty_sigkills_of_the_daemon_during_a_busy_workload_lose_nothing() {
    run_harness("0");
}

/// The same with the warm pool on: pool worktrees are filled, taken, evicted for the
/// queue and left behind by crashes in the middle of all that.
#[test]
fn twenty_sigkills_with_a_warm_pool_lose_nothing_and_leave_nothing() {
    run_harness("2");
}

fn run_harness(pool_size: &str) {
    let seed = std::env::var("GROVE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(clock_seed);
    eprintln!("crash harness seed: {seed} (replay with GROVE_TEST_SEED={seed})");
    let mut rng = Rng(seed | 1);
    let g = Grove::new().with_env(&[
        ("GROVE_MAX_WORKTREES", "20"),
        ("GROVE_BIN", BIN),
        ("GROVE_POOL_SIZE", pool_size),
    ]);
    fs::write(
        g.repo.join(".grove.toml"),
        "[state]\nversion = 1\n[state.channels]\nitems = { reducer = \"append\" }\n",
    )
    .expect("schema");
    g.git(&["add", ".grove.toml"]);
    g.git(&["commit", "-qm", "schema"]);
    let ids: Vec<String> = (0..25)
        .map(|_| g.spawn(&["--session", "crash"], AGENT))
        .collect();

    let lock = g.home.join("daemon.lock");
    let mut kills = 0;
    while kills < 20 {
        // The pause is the stimulus (when to strike), not a wait for a condition.
        std::thread::sleep(Duration::from_millis(rng.between(50, 350)));
        let Some(pid) = fs::read_to_string(&lock)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        else {
            continue;
        };
        if !process_exists(pid) || kill(Pid::from_raw(pid), Signal::SIGKILL).is_err() {
            // Between daemons: bring one up (any command does) and strike again.
            g.run(&["list"]);
            continue;
        }
        kills += 1;
        eventually("killed daemon gone", Duration::from_secs(10), || {
            !process_exists(pid)
        });
        if rng.next().is_multiple_of(2) {
            g.run(&["list"]);
        }
    }

    let mut args = vec!["--json", "wait"];
    args.extend(ids.iter().map(String::as_str));
    let out = g.run(&args);
    assert_eq!(
        out.code,
        0,
        "seed {seed}: {}\n{}\n{}",
        out.stdout,
        out.stderr,
        g.daemon_log()
    );
    let done: Value = serde_json::from_str(&out.stdout).expect("json");
    for agent in done["agents"].as_array().expect("agents") {
        assert_eq!(agent["status"], "collected", "seed {seed}: {agent}");
        assert_eq!(agent["outcome"], "succeeded", "seed {seed}: {agent}");
    }

    let state = g.json(&["state", "get", "--session", "crash"]);
    let items: HashSet<String> = state["state"]["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    for id in &ids {
        let branch = format!("grove/{id}");
        // Every batch the agent saw acknowledged is in the state.
        let files = g.git(&["ls-tree", "-r", "--name-only", &branch]);
        assert!(
            files.lines().any(|f| f == "acked.txt"),
            "seed {seed}: {id} has no acked.txt; branch has {files}\nrecord: {}\nlog:\n{}\nagent log:\n{}",
            g.record(id),
            g.daemon_log_lines(id).join("\n"),
            fs::read_to_string(g.home.join("agents").join(id).join("output.log")).unwrap_or_default()
        );
        let acked = g.git(&["show", &format!("{branch}:acked.txt")]);
        assert_eq!(acked.lines().count(), 8, "seed {seed}: {id}");
        for item in acked.lines() {
            assert!(
                items.contains(item),
                "seed {seed}: acknowledged {item} is missing"
            );
        }
        // Every byte of work is on the branch.
        let files = g.git(&["ls-tree", "-r", "--name-only", &branch]);
        let about_it: Vec<&str> = g.daemon_log_lines(id);
        for i in 1..=8 {
            assert!(
                files.lines().any(|f| f == format!("work-{i}.txt")),
                "seed {seed}: work-{i}.txt of {id} is missing; branch has {files}\nlog:\n{}\nagent log:\n{}\nacked: {}",
                about_it.join("\n"),
                fs::read_to_string(g.home.join("agents").join(id).join("output.log")).unwrap_or_default(),
                g.git(&["show", &format!("{branch}:acked.txt")])
            );
            let file = g.git(&["show", &format!("{branch}:work-{i}.txt")]);
            assert_eq!(file, format!("{id} round {i}\n"), "seed {seed}");
        }
    }
    // The pool a crashed daemon left behind is removed by the next one, in the background.
    eventually("no worktree left", Duration::from_secs(60), || {
        g.worktree_dirs().is_empty()
    });
    assert!(
        g.worktree_dirs().is_empty(),
        "seed {seed}: stray worktrees {:?}",
        g.worktree_dirs()
    );
    let porcelain = g.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(
        porcelain.matches("worktree ").count(),
        1,
        "seed {seed}: {porcelain}"
    );
    assert_eq!(
        g.json(&["list"])["agents"],
        serde_json::json!([]),
        "seed {seed}"
    );
    let branches = g.git(&["branch", "--list", "grove/*"]);
    assert_eq!(branches.lines().count(), 25, "seed {seed}: {branches}");
    eprintln!(
        "warm pool: {} spawns took a pool worktree, {} pool worktrees removed",
        g.daemon_log_lines("taking a warm-pool worktree").len(),
        g.daemon_log_lines("warm-pool worktree removed").len()
    );
    g.git(&["fsck", "--strict"]);
}

/// A seed from the clock, for runs that do not ask for one.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

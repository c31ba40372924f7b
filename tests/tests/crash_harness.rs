//! Fault injection: a busy multi-agent workload (25 agents, cap 20, each writing files
//! and state) while the daemon is killed with SIGKILL at random moments, at least 20
//! times, and restarted each time. Set GROVE_TEST_SEED to replay a run.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::collections::HashSet;
use std::fs;
use std::time::{Duration, Instant};
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
    commit_schema(
        &g,
        "[state]\nversion = 1\n[state.channels]\nitems = { reducer = \"append\" }\n",
    );
    let ids: Vec<String> = (0..25)
        .map(|_| g.spawn(&["--session", "crash"], AGENT))
        .collect();

    let mut kills = 0;
    while kills < 20 {
        // The pause is the stimulus (when to strike), not a wait for a condition.
        std::thread::sleep(Duration::from_millis(rng.between(50, 350)));
        let Some(pid) = g.locked_daemon_pid() else {
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

    wait_all_collected_and_succeeded(&g, seed, &ids);

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
        let acked = g.file_at(&branch, "acked.txt");
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
                g.file_at(&branch, "acked.txt")
            );
            let file = g.file_at(&branch, &format!("work-{i}.txt"));
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

/// Files in the generated repository: enough that `git worktree add` takes half a
/// second or more here, so that kills land inside it.
const SLOW_FILES: usize = 15_000;
const SLOW_AGENTS: usize = 4;
const KILLS_INSIDE_ADD: usize = 10;
/// State updates each agent makes, one every 0.4 s.
const UPDATES: usize = 6;

/// Kills timed inside `git worktree add` of a repository whose checkout takes a while,
/// and the daemon killed at least every second meanwhile, for several seeds
/// (`GROVE_TEST_SEEDS`, default 3; `GROVE_TEST_SEED` replays one): every agent runs
/// exactly once, every state update from inside an agent counts exactly once, and
/// afterwards nothing is left: no worktree, nothing under the worktree root, no stray
/// branch, no cgroup, `git fsck --strict` clean.
#[test]
fn kills_inside_slow_checkouts_run_every_agent_once_and_leave_nothing() {
    let seeds: Vec<u64> = match std::env::var("GROVE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => {
            let count = std::env::var("GROVE_TEST_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(3u64);
            let first = clock_seed();
            (0..count).map(|i| first.wrapping_add(i * 7919)).collect()
        }
    };
    for seed in seeds {
        slow_checkout_run(seed);
    }
}

fn slow_checkout_run(seed: u64) {
    eprintln!("slow-checkout crash run, seed {seed} (replay with GROVE_TEST_SEED={seed})");
    let mut rng = Rng(seed | 1);
    let g = Grove::new();
    let dirs = ["runs", "cgroups", "fails", "marks"].map(|d| {
        let path = g.dir.path().join(d);
        fs::create_dir_all(&path).expect("mkdir");
        path
    });
    let [runs, cgroups, fails, marks] = &dirs;
    fill_slow_repo(&g);
    // Each `git worktree add` is noted by its pid (which the real git keeps: it is
    // exec'd), so the test can strike while one runs.
    let g = g
        .with_git_wrapper(&format!(
            "case \"$*\" in *'worktree add'*) : > '{m}'/add.$$;; esac",
            m = marks.display()
        ))
        .with_env(&[("GROVE_MAX_WORKTREES", "4"), ("GROVE_BIN", BIN)]);
    let script = format!(
        r#"echo run >> '{runs}'/$GROVE_AGENT_ID
cat /proc/self/cgroup > '{cgroups}'/$GROVE_AGENT_ID
for i in $(seq {UPDATES}); do
  echo "$GROVE_AGENT_ID $i" > work-$i.txt
  "$GROVE_BIN" state update items "[\"$GROVE_AGENT_ID-$i\"]" >/dev/null 2>>'{fails}'/$GROVE_AGENT_ID.err || echo "update $i failed" >> '{fails}'/$GROVE_AGENT_ID
  sleep 0.4
done
: > '{runs}'/$GROVE_AGENT_ID.done"#,
        runs = runs.display(),
        cgroups = cgroups.display(),
        fails = fails.display(),
        UPDATES = UPDATES
    );
    // Spawns run while the daemon is being killed: each client rides out the kills.
    let spawn = |g: &Grove| {
        let mut command = g.command();
        command
            .args(["spawn", "--session", "slow", "--", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped());
        command.spawn().expect("grove spawn")
    };
    g.ok(&["list"]);
    let mut spawns: Vec<_> = (0..SLOW_AGENTS).map(|_| spawn(&g)).collect();

    let (mut inside, mut kills) = (0, 0);
    let (mut last_kill, mut last_add) = (Instant::now(), Instant::now());
    let deadline = Instant::now() + Duration::from_secs(120);
    while inside < KILLS_INSIDE_ADD {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: only {inside} of {kills} kills landed inside git worktree add"
        );
        let adding = !running_adds(marks).is_empty();
        if adding {
            last_add = Instant::now();
        } else if last_add.elapsed() > Duration::from_secs(3) && spawns.len() < 3 * SLOW_AGENTS {
            // Every checkout so far completed: another agent brings another one.
            spawns.push(spawn(&g));
            last_add = Instant::now();
        }
        if !adding && last_kill.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if adding {
            // The pause is the stimulus (when to strike within the checkout).
            std::thread::sleep(Duration::from_millis(rng.between(0, 300)));
        }
        let Some(pid) = g.locked_daemon_pid().filter(|pid| process_exists(*pid)) else {
            g.run(&["list"]);
            continue;
        };
        let adding = !running_adds(marks).is_empty();
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_err() {
            continue;
        }
        kills += 1;
        inside += usize::from(adding);
        last_kill = Instant::now();
        eventually("killed daemon gone", Duration::from_secs(10), || {
            !process_exists(pid)
        });
        // Nothing it started outlives it: git's own helpers die with it (issue 29,
        // item 8), before the next daemon could have killed them.
        let gone_by = Instant::now() + Duration::from_millis(300);
        while !daemons_gits(&g).is_empty() {
            assert!(
                Instant::now() < gone_by,
                "seed {seed}: alive 0.3 s after the kill: {:?}",
                daemons_gits(&g)
            );
            std::thread::yield_now();
        }
        g.run(&["list"]);
    }
    eprintln!(
        "seed {seed}: {kills} kills, {inside} inside git worktree add, {} agents",
        spawns.len()
    );
    let ids: Vec<String> = spawns
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("spawn output");
            let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(
                out.status.success() && id.len() == 8,
                "seed {seed}: spawn said {id:?}"
            );
            id
        })
        .collect();
    // Then, once every agent runs (a checkout takes about as long as a restart, so
    // killing every second would keep them all from starting), the daemon dies every
    // second until every agent has made its state updates.
    let started_by = Instant::now() + Duration::from_secs(120);
    while !ids.iter().all(|id| runs.join(id).exists()) {
        if Instant::now() > started_by {
            let waiting: Vec<&String> = ids.iter().filter(|id| !runs.join(id).exists()).collect();
            panic!(
                "seed {seed}: agents {waiting:?} never started\n{}\n{}",
                g.run(&["list", "--all"]).stdout,
                tail(&g.daemon_log(), 80)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now();
    while !ids
        .iter()
        .all(|id| runs.join(format!("{id}.done")).exists())
    {
        if Instant::now() > deadline + Duration::from_secs(60) {
            let runs_now: Vec<String> = fs::read_dir(runs)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            let errors: Vec<String> = ids
                .iter()
                .map(|id| fs::read_to_string(fails.join(format!("{id}.err"))).unwrap_or_default())
                .collect();
            panic!(
                "seed {seed}: agents never finished: runs {runs_now:?}, errors {errors:?}\n{}",
                g.ok(&["list", "--all"])
            );
        }
        std::thread::sleep(Duration::from_millis(rng.between(700, 1000)));
        let pid = g.locked_daemon_pid().filter(|pid| process_exists(*pid));
        if let Some(pid) = pid {
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                kills += 1;
                eventually("killed daemon gone", Duration::from_secs(10), || {
                    !process_exists(pid)
                });
            }
        }
        g.run(&["list"]);
    }
    eprintln!("seed {seed}: {kills} kills in all");
    let all = g.all_agents();
    assert_eq!(
        all.len(),
        ids.len(),
        "seed {seed}: one agent per acknowledged spawn: {all:?}"
    );

    wait_all_collected_and_succeeded(&g, seed, &ids);
    let state = g.json(&["state", "get", "--session", "slow"]);
    let items: Vec<&str> = state["state"]["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for id in &ids {
        let ran = fs::read_to_string(runs.join(id)).unwrap_or_default();
        assert_eq!(ran.lines().count(), 1, "seed {seed}: {id} ran {ran:?}");
        let failed = fs::read_to_string(fails.join(id)).unwrap_or_default();
        let why = fs::read_to_string(fails.join(format!("{id}.err"))).unwrap_or_default();
        assert!(failed.is_empty(), "seed {seed}: {id}: {failed}{why}");
        for i in 1..=UPDATES {
            let item = format!("{id}-{i}");
            let counted = items.iter().filter(|v| **v == item).count();
            assert_eq!(counted, 1, "seed {seed}: {item} counted {counted} times");
            let file = g.agent_file(id, &format!("work-{i}.txt"));
            assert_eq!(file, format!("{id} {i}\n"), "seed {seed}");
        }
    }
    assert_eq!(items.len(), UPDATES * ids.len(), "seed {seed}: {items:?}");
    assert_nothing_left(&g, &ids, cgroups, seed);
}

/// Waits for every agent of `ids`: each must be collected and have succeeded.
fn wait_all_collected_and_succeeded(g: &Grove, seed: u64, ids: &[String]) {
    let mut args = vec!["--json", "wait"];
    args.extend(ids.iter().map(String::as_str));
    let out = g.run(&args);
    assert_eq!(
        out.code,
        0,
        "seed {seed}: wait {ids:?}: {}\n{}\n{}",
        out.stdout,
        out.stderr,
        tail(&g.daemon_log(), 60)
    );
    let done: Value = serde_json::from_str(&out.stdout).expect("json");
    for agent in done["agents"].as_array().expect("agents") {
        assert_eq!(agent["status"], "collected", "seed {seed}: {agent}");
        assert_eq!(agent["outcome"], "succeeded", "seed {seed}: {agent}");
    }
}

/// Nothing of the agents is left once all are collected.
fn assert_nothing_left(g: &Grove, ids: &[String], cgroups: &std::path::Path, seed: u64) {
    // Nothing may wait for a later daemon or a manual step: what a removal could not
    // delete at once is deleted by the same daemon shortly after.
    let mut left = Vec::new();
    let settled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually(
            "nothing under the worktree root",
            Duration::from_secs(60),
            || {
                left = files_under(&g.worktree_root());
                left.is_empty()
            },
        )
    }));
    left.truncate(5);
    assert!(
        settled.is_ok(),
        "seed {seed}: left under the worktree root: {left:?}"
    );
    let porcelain = g.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(
        porcelain.matches("worktree ").count(),
        1,
        "seed {seed}: {porcelain}"
    );
    let branches = g.git(&["branch", "--list", "grove/*"]);
    assert_eq!(
        branches.lines().count(),
        ids.len(),
        "seed {seed}: {branches}"
    );
    let mount = cgroup2_mount();
    for id in ids {
        let Some(mount) = &mount else { break };
        let text = fs::read_to_string(cgroups.join(id)).unwrap_or_default();
        let Some(relative) = text.lines().find_map(|l| l.strip_prefix("0::")) else {
            continue;
        };
        let cgroup = mount.join(relative.trim().trim_start_matches('/'));
        eventually(
            "the agent's cgroup is gone",
            Duration::from_secs(10),
            || !cgroup.exists(),
        );
    }
    g.git(&["fsck", "--strict"]);
}

/// Files anywhere under `root` (empty directories do not count).
fn files_under(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut left = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            } else {
                left.push(entry.path());
            }
        }
    }
    left
}

/// A commit of `SLOW_FILES` small files (and the state schema) on `main`, checked out.
fn fill_slow_repo(g: &Grove) {
    let mut stream = String::from(
        "commit refs/heads/main\ncommitter t <t@example.com> 0 +0000\ndata 5\nslow\nfrom refs/heads/main^0\n",
    );
    let schema = "[state]\nversion = 1\n[state.channels]\nitems = { reducer = \"append\" }\n";
    stream.push_str(&format!(
        "M 100644 inline .grove.toml\ndata {}\n{schema}",
        schema.len()
    ));
    for i in 0..SLOW_FILES {
        let body = format!("file {i}\n");
        stream.push_str(&format!(
            "M 100644 inline d{}/f{i}.txt\ndata {}\n{body}",
            i / 500,
            body.len()
        ));
    }
    let mut import = std::process::Command::new("git");
    import.args(["fast-import", "--quiet"]).current_dir(&g.repo);
    assert!(output_fed(&mut import, stream.as_bytes()).status.success());
    g.git(&["reset", "-q", "--hard", "main"]);
}

/// Pids of `git worktree add` running now.
/// git processes of this grove's daemon (marked with its state directory), with their
/// command lines.
fn daemons_gits(g: &Grove) -> Vec<(u32, String)> {
    let mark = format!("GROVE_DAEMON_GIT={}", g.home.display()).into_bytes();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let environ = fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|var| var == mark.as_slice())
            && process_exists(pid as i32)
        {
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

fn running_adds(marks: &std::path::Path) -> Vec<i32> {
    fs::read_dir(marks)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("add.")?.parse().ok())
        .filter(|pid| process_exists(*pid))
        .collect()
}

/// The last `lines` lines of `text`, in order.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

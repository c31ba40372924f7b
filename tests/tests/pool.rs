//! The warm pool for real: worktrees checked out ahead of time, handed to spawns at
//! their base (never stale), counted inside the cap and evicted first, dropped when the
//! repository goes quiet, removed (salvaged) after a crash.

mod support;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const LONG: Duration = Duration::from_secs(60);

fn pooled(size: &str) -> Grove {
    Grove::new().with_env(&[("GROVE_POOL_SIZE", size)])
}

/// Runs one agent to its end: a repository gets a warm pool once it had a spawn.
fn run_one_agent(g: &Grove) {
    let first = g.spawn(&[], "true");
    g.wait(&first);
}

fn gate_script(gates: &Path, name: &str) -> String {
    format!(
        "while [ ! -e '{}/{name}' ]; do sleep 0.05; done",
        gates.display()
    )
}

fn pool(g: &Grove) -> Vec<Value> {
    g.json(&["daemon", "status"])["pool"]
        .as_array()
        .expect("pool")
        .clone()
}

fn ready_pool(g: &Grove) -> Vec<Value> {
    pool(g).into_iter().filter(|p| p["ready"] == true).collect()
}

fn wait_for_ready_pool(g: &Grove, count: usize) -> Vec<Value> {
    eventually(&format!("{count} ready pool worktrees"), LONG, || {
        ready_pool(g).len() == count
    });
    ready_pool(g)
}

fn pool_paths(g: &Grove) -> Vec<PathBuf> {
    g.worktree_dirs_named("pool-")
}

/// `git worktree list --porcelain`, one block per worktree.
fn git_worktrees(g: &Grove) -> Vec<String> {
    g.git(&["worktree", "list", "--porcelain"])
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn block_of(g: &Grove, path: &Path) -> String {
    git_worktrees(g)
        .into_iter()
        .find(|b| b.starts_with(&format!("worktree {}\n", path.display())))
        .unwrap_or_else(|| panic!("{} not in git worktree list", path.display()))
}

#[test]
fn a_spawn_takes_a_warm_worktree_with_its_own_branch_and_the_pool_refills() {
    let g = pooled("2");
    run_one_agent(&g);
    let warm = wait_for_ready_pool(&g, 2);
    let head = g.git(&["rev-parse", "main"]).trim().to_string();
    for entry in &warm {
        assert_eq!(entry["commit"], head.as_str());
        let path = PathBuf::from(entry["path"].as_str().expect("path"));
        let block = block_of(&g, &path);
        assert!(block.contains("detached"), "{block}");
        assert!(block.contains("locked grove warm pool"), "{block}");
    }
    let warm_paths: Vec<String> = warm
        .iter()
        .map(|p| p["path"].as_str().expect("path").to_string())
        .collect();

    let gates = g.make_dir("gates");
    let script = format!(
        "branch=$(git symbolic-ref HEAD); dirty=$(git status --porcelain | wc -l); \
         printf '%s %s\\n' \"$branch\" \"$dirty\" > probe.txt; {}",
        gate_script(&gates, "go")
    );
    let id = g.spawn(&[], &script);
    assert!(
        g.daemon_log()
            .lines()
            .any(|l| l.contains("taking a warm-pool worktree") && l.contains(&id)),
        "the spawn did not use the pool:\n{}",
        g.daemon_log()
    );
    let record = g.record(&id);
    let worktree = PathBuf::from(record["worktree"].as_str().expect("worktree"));
    assert_eq!(worktree.file_name().expect("name").to_string_lossy(), id);
    eventually("the agent probed its worktree", LONG, || {
        worktree.join("probe.txt").exists()
    });
    let block = block_of(&g, &worktree);
    assert_holds_all(
        &block,
        &[
            &format!("branch refs/heads/grove/{id}"),
            &format!("locked grove agent {id}"),
        ],
    );
    // The taken worktree left the pool; a new one takes its place.
    eventually("the pool refilled", LONG, || {
        let ready = ready_pool(&g);
        ready.len() == 2
            && ready
                .iter()
                .any(|p| !warm_paths.contains(&p["path"].as_str().unwrap_or("").to_string()))
    });

    fs::write(gates.join("go"), "").expect("gate");
    let done = g.wait(&id);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    let probe = g.agent_file(&id, "probe.txt");
    assert_eq!(probe.trim(), format!("refs/heads/grove/{id} 0"));
    g.git(&["fsck", "--strict"]);
}

#[test]
fn a_moved_base_is_checked_forward_never_handed_out_stale() {
    let g = pooled("1");
    run_one_agent(&g);
    let old = g.git(&["rev-parse", "main"]).trim().to_string();
    wait_for_ready_pool(&g, 1);

    fs::write(g.repo.join("new.txt"), "moved\n").expect("write");
    g.git(&["add", "new.txt"]);
    g.git(&["commit", "-q", "-m", "base moves"]);
    let new = g.git(&["rev-parse", "main"]).trim().to_string();
    assert_ne!(old, new);

    let id = g.spawn(
        &[],
        "probe=$(git rev-parse HEAD; cat new.txt; git status --porcelain | wc -l); \
         printf '%s\\n' \"$probe\" > probe.txt",
    );
    let done = g.wait(&id);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    assert!(g
        .daemon_log()
        .lines()
        .any(|l| l.contains("taking a warm-pool worktree") && l.contains(&id)));
    let probe = g.agent_file(&id, "probe.txt");
    assert_eq!(probe, format!("{new}\nmoved\n0\n"));
    assert_eq!(done["base_commit"], new.as_str());
    // The refill follows the new base.
    eventually("the pool is warm at the new base", LONG, || {
        let ready = ready_pool(&g);
        ready.len() == 1 && ready[0]["commit"] == new.as_str()
    });
}

#[test]
fn the_pool_counts_inside_the_cap_and_gives_way_to_agents() {
    let g = pooled("2").with_env(&[("GROVE_MAX_WORKTREES", "3")]);
    let other = g.dir.path().join("other");
    init_repo(&other);
    let gates = g.make_dir("gates");

    let a = g.spawn(&[], &gate_script(&gates, "a"));
    wait_for_ready_pool(&g, 2);
    assert_eq!(g.worktree_dirs().len(), 3);

    // Another repository: the pool must give up a slot, and the spawn starts at once.
    let other_repo = other.display().to_string();
    let b = g.spawn(&["--repo", &other_repo], &gate_script(&gates, "b"));
    assert_eq!(g.status(&b), "running");
    assert!(g.worktree_dirs().len() <= 3, "{:?}", g.worktree_dirs());
    // A third agent in the first repository takes the last pool worktree.
    let c = g.spawn(&[], &gate_script(&gates, "c"));
    assert_eq!(g.status(&c), "running");
    assert!(g.worktree_dirs().len() <= 3, "{:?}", g.worktree_dirs());
    assert!(pool_paths(&g).is_empty(), "{:?}", g.worktree_dirs());
    // Full: the next one queues, and starts when a slot frees.
    let d = g.spawn(&[], &gate_script(&gates, "d"));
    assert_eq!(g.status(&d), "queued");
    fs::write(gates.join("a"), "").expect("gate");
    g.wait(&a);
    eventually("d starts", LONG, || g.status(&d) == "running");
    for gate in ["b", "c", "d"] {
        fs::write(gates.join(gate), "").expect("gate");
    }
    for id in [&b, &c, &d] {
        assert_eq!(g.wait(id)["outcome"], "succeeded");
    }
    // Nobody waits any more: the pool comes back (both repositories had spawns lately),
    // still inside the cap.
    eventually("the pool is back", LONG, || ready_pool(&g).len() >= 2);
    assert!(g.worktree_dirs().len() <= 3, "{:?}", g.worktree_dirs());
}

#[test]
fn a_quiet_repository_loses_its_pool_and_what_was_written_there_is_salvaged() {
    let g = pooled("2").with_env(&[("GROVE_POOL_IDLE", "5s")]);
    run_one_agent(&g);
    let warm = wait_for_ready_pool(&g, 2);
    let scribbled = PathBuf::from(warm[0]["path"].as_str().expect("path"));
    let name = scribbled
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    fs::write(scribbled.join("stray.txt"), "someone's work\n").expect("write");

    eventually("the pool is dropped", LONG, || {
        pool(&g).is_empty() && pool_paths(&g).is_empty()
    });
    let salvaged = g.git(&["show", &format!("refs/grove/salvage/{name}:stray.txt")]);
    assert_eq!(salvaged, "someone's work\n");
    // Only the worktree that held something left a ref behind.
    let refs = g.git(&["for-each-ref", "--format=%(refname)", "refs/grove/salvage"]);
    assert_eq!(refs.trim(), format!("refs/grove/salvage/{name}"));
    assert_eq!(git_worktrees(&g).len(), 1, "{:?}", git_worktrees(&g));
    g.git(&["fsck", "--strict"]);
}

#[test]
fn pool_worktrees_of_a_crashed_daemon_are_removed_not_trusted() {
    let g = pooled("2");
    run_one_agent(&g);
    wait_for_ready_pool(&g, 2);
    let before = pool_paths(&g);
    assert_eq!(before.len(), 2);
    g.crash_daemon();

    // A fresh daemon, no spawn yet: the old pool goes and no new one comes.
    g.ok(&["list"]);
    eventually("the old pool is removed", LONG, || {
        pool_paths(&g).is_empty()
    });
    assert!(pool(&g).is_empty());
    assert_eq!(git_worktrees(&g).len(), 1, "{:?}", git_worktrees(&g));
    let refs = g.git(&["for-each-ref", "refs/grove/salvage"]);
    assert!(refs.trim().is_empty(), "{refs}");

    // The next spawn warms it again.
    let id = g.spawn(&[], "true");
    g.wait(&id);
    wait_for_ready_pool(&g, 2);
}

#[test]
fn sparse_spawns_do_not_use_the_pool() {
    let g = pooled("1");
    fs::create_dir_all(g.repo.join("app")).expect("mkdir");
    fs::write(g.repo.join("app/a.txt"), "a\n").expect("write");
    g.git(&["add", "."]);
    g.git(&["commit", "-q", "-m", "app"]);
    run_one_agent(&g);
    wait_for_ready_pool(&g, 1);
    let id = g.spawn(&["--sparse", "app"], "ls > listing.txt");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert!(!g
        .daemon_log()
        .lines()
        .any(|l| l.contains("taking a warm-pool worktree") && l.contains(&id)));
    assert_eq!(ready_pool(&g).len(), 1);
}

#[test]
fn a_crash_while_a_spawn_takes_a_pool_worktree_loses_nothing() {
    crash_while_taking_a_pool_worktree(&[]);
}

/// A spawn (with `flags`) crashes its daemon while it takes a pool worktree: the next
/// daemon rolls the half-taken worktree back and runs the agent afresh, once, leaving
/// its branch and nothing else.
fn crash_while_taking_a_pool_worktree(flags: &[&str]) {
    let g = pooled("1");
    let crash = [("GROVE_TEST_CRASH_AT", "mid_pool_adopt")];
    // The daemon that crashes is started by this command, with the crash point set.
    let out = g.run_env(&["spawn", "--", "true"], &crash);
    assert_eq!(out.code, 0, "{}", out.stderr);
    g.wait(out.stdout.trim());
    wait_for_ready_pool(&g, 1);
    let mut spawn = SPAWN_KEEPING_ENV.to_vec();
    spawn.splice(1..1, flags.iter().copied());
    g.crash_during("mid_pool_adopt", &spawn);

    let agents = g.json(&["list", "--all"])["agents"].clone();
    let id = agents
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["argv"][0] == "sh")
        .and_then(|a| a["id"].as_str())
        .expect("the second agent")
        .to_string();
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    assert_eq!(g.agent_file(&id, "x.txt"), "kept\n");
    eventually("no worktree left", LONG, || {
        g.worktree_dirs().is_empty() && git_worktrees(&g).len() == 1
    });
    let branches = g.git(&["branch", "--list", "grove/*"]);
    assert_eq!(branches.trim(), format!("grove/{id}"));
    g.git(&["fsck", "--strict"]);
}

/// Whether the index at `path` carries a valid cache tree for its root (the `TREE`
/// extension with a non-negative entry count), which `git status` and `git commit`
/// use instead of hashing every directory again.
fn has_valid_root_cache_tree(index: &Path) -> bool {
    let bytes = fs::read(index).expect("read index");
    bytes.windows(4).enumerate().any(|(at, window)| {
        if window != b"TREE" {
            return false;
        }
        // "TREE", a 4-byte size, then the root: an empty path, NUL, "<entries> <subtrees>\n".
        let body = &bytes[(at + 8).min(bytes.len())..];
        body.first() == Some(&0) && body.get(1).is_some_and(u8::is_ascii_digit)
    })
}

fn index_of(worktree: &Path) -> PathBuf {
    let path = git_in(
        worktree,
        &["rev-parse", "--path-format=absolute", "--git-path", "index"],
    );
    PathBuf::from(path.trim())
}

#[test]
fn new_worktrees_have_their_cache_tree_written_pooled_or_not() {
    let g = pooled("1");
    let gates = g.make_dir("gates");
    let unpooled = g.spawn(&[], &gate_script(&gates, "a"));
    wait_for_ready_pool(&g, 1);
    let pooled = g.spawn(&[], &gate_script(&gates, "b"));
    assert!(g
        .daemon_log()
        .lines()
        .any(|l| l.contains("taking a warm-pool worktree") && l.contains(&pooled)));
    for id in [&unpooled, &pooled] {
        let worktree = PathBuf::from(g.record(id)["worktree"].as_str().expect("worktree"));
        assert!(
            has_valid_root_cache_tree(&index_of(&worktree)),
            "{id}: no cache tree in {}",
            index_of(&worktree).display()
        );
    }
    for gate in ["a", "b"] {
        fs::write(gates.join(gate), "").expect("gate");
    }
    for id in [&unpooled, &pooled] {
        assert_eq!(g.wait(id)["outcome"], "succeeded");
    }
}

#[test]
fn a_stopped_daemon_leaves_no_pool_worktree_behind() {
    let g = pooled("2");
    run_one_agent(&g);
    wait_for_ready_pool(&g, 2);
    g.ok(&["daemon", "stop"]);
    assert!(
        pool_paths(&g).is_empty(),
        "{:?}\n{}",
        g.worktree_dirs(),
        g.daemon_log()
    );
    assert_eq!(git_worktrees(&g).len(), 1, "{:?}", git_worktrees(&g));
    assert!(g
        .git(&["for-each-ref", "refs/grove/salvage"])
        .trim()
        .is_empty());
}

/// Issue 28: a jailed spawn takes a warm-pool worktree too, which becomes a repository
/// of the agent's own (its `.git` a directory, no longer a worktree of the user's), with
/// the checkout and its index as they were: clean at once, on its branch, and its work
/// comes back on that branch.
#[test]
fn a_jailed_spawn_takes_a_warm_worktree_as_a_repository_of_its_own() {
    if !(have_landlock() && writable_cgroup2().is_some()) {
        return;
    }
    let g = pooled("1");
    run_one_agent(&g);
    let warm = wait_for_ready_pool(&g, 1);
    let warm_path = warm[0]["path"].as_str().expect("path").to_string();
    let script = "branch=$(git symbolic-ref HEAD); dirty=$(git status --porcelain | wc -l); \
                  own=$(test -d .git && echo own); \
                  printf '%s %s %s\\n' \"$branch\" \"$dirty\" \"$own\" > probe.txt; \
                  alt=$(cat .git/objects/info/alternates); \
                  (echo x > \"$alt/planted\") 2>/dev/null && echo escaped >> probe.txt; \
                  echo work > work.txt; git add work.txt probe.txt && git commit -qm work";
    let id = g.spawn(&["--jail"], script);
    assert!(
        g.daemon_log()
            .lines()
            .any(|l| l.contains("taking a warm-pool worktree") && l.contains(&id)),
        "the jailed spawn did not use the pool:\n{}",
        g.daemon_log()
    );
    let done = g.wait(&id);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    assert_eq!(
        g.agent_file(&id, "probe.txt").trim(),
        format!("refs/heads/grove/{id} 0 own")
    );
    assert_eq!(g.agent_file(&id, "work.txt"), "work\n");
    assert!(
        !g.repo.join(".git/objects/planted").exists(),
        "the jailed agent wrote into the user's objects"
    );
    let listed = git_worktrees(&g);
    assert!(
        !listed
            .iter()
            .any(|b| b.contains(&id) || b.contains(&warm_path)),
        "{listed:?}"
    );
    g.git(&["fsck", "--strict"]);
}

/// A crash while a jailed spawn turns a pool worktree into its repository: the next
/// daemon rolls it back and runs the agent afresh, once, leaving nothing behind.
#[test]
fn a_crash_while_a_jailed_spawn_takes_a_pool_worktree_loses_nothing() {
    if have_landlock() && writable_cgroup2().is_some() {
        crash_while_taking_a_pool_worktree(&["--jail"]);
    }
}

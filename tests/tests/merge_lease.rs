//! `grove merge` runs git in the user's process under a lease on the repository from
//! the daemon: grove makes no change of its own to the repository meanwhile, the lease
//! ends with the merge's connection, and a temporary worktree that a killed merge left
//! is salvaged and removed by the next daemon's janitor.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const LONG: Duration = Duration::from_secs(60);

/// A `post-checkout` hook (the user's own: `grove merge` runs their hooks) that, in a
/// merge's temporary worktree, says it is there, waits for `gate`, then writes what
/// `git worktree list` says at that moment.
struct Pause {
    dir: PathBuf,
}

impl Pause {
    fn install(g: &Grove) -> Pause {
        let dir = g.make_dir("pause");
        let hook = g.repo.join(".git/hooks/post-checkout");
        let d = dir.display();
        fs::write(
            &hook,
            format!(
                "#!/bin/sh\ncase \"$(pwd)\" in *merge-*) touch '{d}/inside'\n  while [ ! -e '{d}/gate' ]; do sleep 0.05; done\n  git worktree list --porcelain > '{d}/seen' && mv '{d}/seen' '{d}/worktrees' ;; esac\n"
            ),
        )
        .expect("hook");
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).expect("chmod");
        Pause { dir }
    }

    fn wait_inside(&self) {
        let inside = self.dir.join("inside");
        eventually("the merge is in its temporary worktree", LONG, || {
            inside.exists()
        });
    }

    fn open(&self) {
        fs::write(self.dir.join("gate"), "").expect("gate");
    }

    fn worktrees_seen(&self) -> String {
        let seen = self.dir.join("worktrees");
        eventually("the hook said what it saw", LONG, || seen.exists());
        fs::read_to_string(seen).expect("worktrees seen by the hook")
    }
}

/// A finished agent with one commit; a branch `stable` at the base, checked out nowhere
/// (so that the merge needs a temporary worktree).
fn agent_and_stable(g: &Grove) -> String {
    g.git(&["branch", "stable"]);
    let id = g.spawn(&[], "echo a > a.txt && git add a.txt && git commit -qm a");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    id
}

fn merge_in_background(g: &Grove, id: &str) -> std::process::Child {
    g.command()
        .args(["--json", "merge", id, "--into", "stable"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Its own process group: the test kills the merge with its git and hook.
        .process_group(0)
        .spawn()
        .expect("grove merge")
}

fn temp_worktrees(g: &Grove) -> Vec<PathBuf> {
    g.worktree_dirs_named("merge-")
}

fn connections(c: &mut grove_proto::Client) -> f64 {
    let metrics = call(c, "daemon.metrics", serde_json::json!({})).expect("metrics");
    metrics["metrics"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "grove_connections"))
        .and_then(|m| m["series"][0]["value"].as_f64())
        .unwrap_or(0.0)
}

fn blocks(listing: &str) -> usize {
    listing.matches("worktree ").count()
}

#[test]
fn a_merge_while_the_pool_refills_does_not_race() {
    let g = Grove::new().with_env(&[("GROVE_POOL_SIZE", "2")]);
    let id = agent_and_stable(&g);
    eventually("a full warm pool", LONG, || {
        g.json(&["daemon", "status"])["pool"]
            .as_array()
            .is_some_and(|p| p.iter().filter(|e| e["ready"] == true).count() == 2)
    });
    let before = blocks(&g.git(&["worktree", "list", "--porcelain"]));
    let pause = Pause::install(&g);
    let merge = merge_in_background(&g, &id);
    pause.wait_inside();

    // A spawn now takes a warm worktree, and the pool wants to refill; neither may
    // change the repository while the merge holds it.
    let spawner = {
        let mut command = g.command();
        command.args(["spawn", "--", "sh", "-c", "echo b > b.txt"]);
        std::thread::spawn(move || command.output().expect("spawn"))
    };
    // Its connection is open (the merge holds two, this test one): the spawn is in
    // the daemon, waiting for the repository.
    let mut watcher = client(&g);
    eventually("the spawn reached the daemon", LONG, || {
        connections(&mut watcher) >= 4.0
    });
    assert!(!spawner.is_finished(), "the spawn waits for the merge");
    pause.open();
    let seen = pause.worktrees_seen();
    assert_eq!(
        blocks(&seen),
        before + 1,
        "only the merge's temporary worktree was added while it held the repository:\n{seen}"
    );

    let out = merge.wait_with_output().expect("merge");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["result"], "merged", "{report}");
    assert_eq!(report["temporary"], true);
    assert_eq!(g.git(&["show", "stable:a.txt"]), "a\n");

    let spawned = spawner.join().expect("spawner");
    assert!(spawned.status.success(), "{:?}", spawned);
    let child = String::from_utf8_lossy(&spawned.stdout).trim().to_string();
    assert_eq!(g.wait(&child)["outcome"], "succeeded");
    eventually("the pool refilled after the merge", LONG, || {
        g.json(&["daemon", "status"])["pool"]
            .as_array()
            .is_some_and(|p| p.iter().filter(|e| e["ready"] == true).count() == 2)
    });
    assert!(temp_worktrees(&g).is_empty(), "{:?}", temp_worktrees(&g));
    assert!(g.daemon_log().contains("merged by grove merge"));
}

#[test]
fn a_merge_killed_midway_leaves_nothing_the_next_daemon_does_not_clean_up() {
    let g = Grove::new();
    let id = agent_and_stable(&g);
    let stable = g.git(&["rev-parse", "stable"]).trim().to_string();
    let pause = Pause::install(&g);
    let merge = merge_in_background(&g, &id);
    pause.wait_inside();
    let temp = temp_worktrees(&g);
    assert_eq!(
        temp.len(),
        1,
        "the temporary worktree is under the worktree root"
    );
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(merge.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the merge");
    let _ = merge.wait_with_output();
    assert!(g
        .git(&["worktree", "list", "--porcelain"])
        .contains("branch refs/heads/stable"));

    // The lease ended with the killed merge's connection: grove works in the repository.
    let after = g.spawn(&[], "true");
    assert_eq!(g.wait(&after)["outcome"], "succeeded");

    // The next daemon's start-up scan salvages and removes the dead merge's worktree.
    g.crash_daemon();
    g.ok(&["list"]);
    eventually(
        "the janitor removed the dead merge's worktree",
        LONG,
        || !temp[0].exists(),
    );
    let listing = g.git(&["worktree", "list", "--porcelain"]);
    assert!(
        !listing.contains("branch refs/heads/stable"),
        "stable is checked out nowhere:\n{listing}"
    );
    assert!(
        !listing.contains(&temp[0].display().to_string()),
        "{listing}"
    );
    assert_eq!(g.git(&["rev-parse", "stable"]).trim(), stable, "untouched");

    // And the next merge gets a temporary worktree of its own, not the dead one.
    fs::remove_file(g.repo.join(".git/hooks/post-checkout")).expect("rm hook");
    let report = g.json(&["merge", &id, "--into", "stable"]);
    assert_eq!(report["result"], "merged", "{report}");
    assert_eq!(report["temporary"], true);
    assert_ne!(
        Path::new(report["worktree"].as_str().expect("worktree")),
        temp[0]
    );
    assert_eq!(g.git(&["show", "stable:a.txt"]), "a\n");
}

/// Without a daemon restart: the next merge's lease reaps the dead merge's worktree
/// first, so it never merges in a worktree that a killed merge left half done.
#[test]
fn the_next_merge_reaps_a_killed_merges_worktree_first() {
    let g = Grove::new();
    let id = agent_and_stable(&g);
    let pause = Pause::install(&g);
    let merge = merge_in_background(&g, &id);
    pause.wait_inside();
    let temp = temp_worktrees(&g);
    assert_eq!(temp.len(), 1);
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(merge.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the merge");
    let _ = merge.wait_with_output();

    fs::remove_file(g.repo.join(".git/hooks/post-checkout")).expect("rm hook");
    let report = g.json(&["merge", &id, "--into", "stable"]);
    assert_eq!(report["result"], "merged", "{report}");
    assert_eq!(report["temporary"], true, "not merged in the dead worktree");
    assert!(!temp[0].exists(), "the dead merge's worktree was removed");
    assert!(temp_worktrees(&g).is_empty());
    let listing = g.git(&["worktree", "list", "--porcelain"]);
    assert!(!listing.contains("branch refs/heads/stable"), "{listing}");
    assert!(g
        .daemon_log()
        .contains("a killed `grove merge` left it behind"));
}

#[test]
fn an_agent_cannot_take_a_lease() {
    let g = Grove::new();
    let out = g.dir.path().join("lease.out");
    // A real client inside an agent asks for the lease over the socket.
    let script = format!(
        r#"python3 - > {out} <<'PY'
import json, os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["GROVE_SOCKET"])
f = s.makefile("rw")
def call(i, method, params):
    f.write(json.dumps({{"jsonrpc": "2.0", "id": i, "method": method, "params": params}}) + "\n")
    f.flush()
    return json.loads(f.readline())
call(1, "hello", {{"protocol": {proto}}})
print(json.dumps(call(2, "repo.lease", {{"repo": os.getcwd()}})))
PY"#,
        out = out.display(),
        proto = grove_proto::PROTOCOL_VERSION
    );
    if !can_run("python3", (!have_python3()).then(|| "no python3".into())) {
        return;
    }
    let id = g.spawn(&[], &script);
    g.wait(&id);
    let answer = fs::read_to_string(&out).expect("answer");
    let answer: serde_json::Value = serde_json::from_str(answer.trim()).expect("json");
    assert_eq!(answer["error"]["code"], -32008, "{answer}");
}

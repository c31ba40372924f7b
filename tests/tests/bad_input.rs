//! Every bad input gets a clear error and changes nothing.

mod support;

use serde_json::Value;
use std::fs;
use std::path::Path;
use support::*;

/// What a failed spawn must leave untouched.
#[derive(Debug, PartialEq)]
struct Snapshot {
    agents: Value,
    refs: String,
    worktrees: String,
    dirs: Vec<std::path::PathBuf>,
}

fn snapshot(g: &Grove, repo: &Path) -> Snapshot {
    let refs = if repo.join(".git").exists() {
        git_in(repo, &["for-each-ref"])
    } else {
        String::new()
    };
    let worktrees = if repo.join(".git").exists() {
        git_in(repo, &["worktree", "list", "--porcelain"])
    } else {
        String::new()
    };
    Snapshot {
        agents: g.json(&["list", "--all"]),
        refs,
        worktrees,
        dirs: g.worktree_dirs(),
    }
}

/// Runs a spawn that must fail with exit code 2 and `needle` in its message.
fn refused(g: &Grove, repo: &Path, args: &[&str], needle: &str) {
    let before = snapshot(g, repo);
    let out = g.run(args);
    assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    assert!(
        out.stderr.contains(needle),
        "{args:?}: expected {needle:?} in {}",
        out.stderr
    );
    assert_eq!(snapshot(g, repo), before, "{args:?} changed something");
}

/// `grove spawn FLAGS -- true` in the test's repository is refused with `needle`.
fn refused_spawn(g: &Grove, flags: &[&str], needle: &str) {
    let args: Vec<&str> = ["spawn"]
        .iter()
        .chain(flags)
        .chain(&["--", "true"])
        .copied()
        .collect();
    refused(g, &g.repo, &args, needle);
}

#[test]
fn not_a_git_repository() {
    let g = Grove::new();
    let plain = g.make_dir("plain");
    let p = plain.to_str().expect("utf8");
    refused(
        &g,
        &g.repo,
        &["spawn", "--repo", p, "--", "true"],
        "is not inside a git repository",
    );
    let missing = g.dir.path().join("missing");
    refused(
        &g,
        &g.repo,
        &[
            "spawn",
            "--repo",
            missing.to_str().expect("utf8"),
            "--",
            "true",
        ],
        "does not exist",
    );
}

#[test]
fn bare_repository() {
    let g = Grove::new();
    let bare = g.dir.path().join("bare.git");
    git_in(
        g.dir.path(),
        &["init", "-q", "--bare", bare.to_str().expect("utf8")],
    );
    refused(
        &g,
        &bare,
        &[
            "spawn",
            "--repo",
            bare.to_str().expect("utf8"),
            "--",
            "true",
        ],
        "is a bare repository",
    );
}

#[test]
fn base_that_does_not_exist() {
    let g = Grove::new();
    refused_spawn(
        &g,
        &["--base", "no-such-branch"],
        "base `no-such-branch` is not a branch, tag or commit",
    );
}

#[test]
fn empty_repository_with_unborn_head() {
    let g = Grove::new();
    let empty = g.make_dir("empty");
    git_in(&empty, &["init", "-q"]);
    refused(
        &g,
        &empty,
        &[
            "spawn",
            "--repo",
            empty.to_str().expect("utf8"),
            "--",
            "true",
        ],
        "has no commits yet",
    );
}

#[test]
fn names_that_cannot_be_a_branch_component() {
    let g = Grove::new();
    for name in ["a/b", "has space", "..", "x~y", ".hidden"] {
        refused_spawn(&g, &["--name", name], "cannot be part of a branch name");
    }
}

#[test]
fn empty_command() {
    let g = Grove::new();
    refused(&g, &g.repo, &["spawn"], "no command given");
    refused(&g, &g.repo, &["spawn", "--", ""], "empty string");
}

/// Issue 30, item 8: words before `--` without `--agent` were dropped without a word.
#[test]
fn words_before_the_command_without_a_preset() {
    let g = Grove::new();
    refused_spawn(&g, &["--timeout", "5", "parsecs"], "`parsecs` before `--`");
}

/// `grove kill` of several ids looks them all up first: one unknown kills none.
#[test]
fn kill_with_an_unknown_id_among_known_ones_kills_none() {
    let g = Grove::new();
    let id = g.spawn(&[], "sleep 30");
    let out = g.run(&["kill", &id, "ffff0000"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("ffff0000"), "{}", out.stderr);
    assert_eq!(g.record(&id)["status"], "running");
    g.ok(&["kill", &id]);
}

#[test]
fn malformed_flags() {
    let g = Grove::new();
    for (flags, needle) in [
        (["--env", "NOVALUE"], "is not NAME=VALUE"),
        (["--timeout", "soon"], "is not a duration"),
        (["--timeout", "0"], "longer than zero"),
        (["--memory", "lots"], "is not a size"),
    ] {
        refused_spawn(&g, &flags, needle);
    }
}

#[test]
fn command_that_does_not_exist_is_refused_at_spawn() {
    let g = Grove::new();
    let out = g.run_env(
        &["spawn", "--", "no-such-command-anywhere", "--flag"],
        &[("PATH", "/usr/bin:/bin")],
    );
    out.assert_exit(
        2,
        &["command not found: no-such-command-anywhere; PATH searched: /usr/bin:/bin"],
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
}

#[test]
fn command_that_is_not_there_when_it_starts_fails_with_127_and_is_collected() {
    let g = Grove::new();
    let mut c = support::client(&g);
    let spawned = support::call(
        &mut c,
        "agent.spawn",
        // A path is looked up in the worktree, when the agent starts.
        serde_json::json!({"argv": ["./no-such-command-anywhere", "--flag"], "repo": g.repo}),
    )
    .expect("spawn");
    let id = spawned["id"].as_str().expect("id").to_string();
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected");
    assert_eq!(record["outcome"], "failed");
    assert_eq!(record["exit_code"], 127);
    let log = g.ok(&["logs", &id]);
    assert!(
        log.contains("cannot run `./no-such-command-anywhere`: command not found"),
        "{log}"
    );
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
}

#[test]
fn detached_head_without_base_starts_from_the_commit() {
    let g = Grove::new();
    let head = g.git(&["rev-parse", "HEAD"]).trim().to_string();
    g.git(&["checkout", "-q", "--detach"]);
    let id = g.spawn(&[], "echo x > x.txt");
    let record = g.wait(&id);
    assert_eq!(record["base_ref"], head.as_str());
    assert_eq!(record["base_commit"], head.as_str());
    assert_eq!(g.git(&["rev-parse", &format!("grove/{id}~1")]).trim(), head);
}

#[test]
fn explicit_base_branch_is_used() {
    let g = Grove::new();
    g.git(&["checkout", "-q", "-b", "other"]);
    fs::write(g.repo.join("other.txt"), "other\n").expect("write");
    g.git(&["add", "."]);
    g.git(&["commit", "-q", "-m", "other"]);
    g.git(&["checkout", "-q", "main"]);
    let id = g.spawn(&["--base", "other"], "cat other.txt > copy.txt");
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded");
    assert_eq!(record["base_ref"], "other");
    assert_eq!(g.agent_file(&id, "copy.txt"), "other\n");
}

#[test]
fn repository_path_with_spaces_and_unicode() {
    let g = Grove::new();
    let odd = g.dir.path().join("my répo ünïcode 🌳");
    init_repo(&odd);
    let id = g
        .ok(&[
            "spawn",
            "--repo",
            odd.to_str().expect("utf8"),
            "--",
            "sh",
            "-c",
            "echo ok > ok.txt",
        ])
        .trim()
        .to_string();
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded");
    assert_eq!(
        git_in(&odd, &["show", &format!("grove/{id}:ok.txt")]),
        "ok\n"
    );
    assert!(g.worktree_dirs().is_empty());
    git_in(&odd, &["fsck", "--strict"]);
}

#[test]
fn spawn_from_a_subdirectory_and_from_a_linked_worktree_uses_the_main_repository() {
    let g = Grove::new();
    // The record of an agent spawned from `dir` without --repo.
    let spawned_in = |dir: &Path| {
        let spawn = stdout_of(
            g.command().current_dir(dir).args(["spawn", "--", "true"]),
            "spawn",
        );
        let id = spawn.trim().to_string();
        g.wait(&id)
    };
    let main_repo = g.repo.canonicalize().expect("canon");
    let record = spawned_in(&g.repo.join("src"));
    assert_eq!(record["repo"], main_repo.to_str().expect("utf8"));

    let linked = g.dir.path().join("linked");
    g.git(&["worktree", "add", "-q", linked.to_str().expect("utf8")]);
    let record = spawned_in(&linked);
    assert_eq!(record["repo"], main_repo.to_str().expect("utf8"));
    // The base is the linked worktree's branch, which is where the user stood.
    assert_eq!(record["base_ref"], "linked");
}

#[test]
fn unknown_and_ambiguous_id_prefixes() {
    let g = Grove::new();
    // 17 ids over 16 hex digits: two must share a first character.
    let mut ids = Vec::new();
    for _ in 0..17 {
        ids.push(g.ok(&["spawn", "--", "true"]).trim().to_string());
    }
    let mut args = vec!["wait"];
    args.extend(ids.iter().map(String::as_str));
    g.ok(&args);
    let shared = ids
        .iter()
        .map(|id| &id[..1])
        .find(|c| ids.iter().filter(|id| id.starts_with(*c)).count() > 1)
        .expect("pigeonhole");
    g.refused_all(
        &["show", shared],
        &[&format!("`{shared}` matches"), "give more characters"],
    );
    g.refused(&["wait", "ffffffffff"], "no agent has an id starting with");
}

//! `grove restore`: salvaged work comes back under grove's worktree root, and grove
//! tracks it like an agent's kept worktree (list, diff, merge, rm with salvage first,
//! across daemon restarts).

mod support;

use std::fs;
use std::path::PathBuf;
use support::*;

/// An agent's branch discarded (its tip kept under a salvage ref); returns the ref's name.
fn discarded_work(g: &Grove) -> String {
    let id = g.spawn(&[], "echo salvaged > back.txt");
    g.wait(&id);
    g.ok(&["discard", &id, "--yes"]);
    format!("discarded-{id}")
}

#[test]
fn a_restored_worktree_lives_under_the_root_and_is_tracked_like_an_agents() {
    let g = Grove::new();
    let name = discarded_work(&g);
    let restored = g.json(&["restore", &name]);
    let id = restored["id"].as_str().expect("id").to_string();
    let path = PathBuf::from(restored["worktree"].as_str().expect("path"));
    assert!(
        path.starts_with(g.worktree_root()),
        "{} is not under {}",
        path.display(),
        g.worktree_root().display()
    );
    assert_eq!(
        fs::read_to_string(path.join("back.txt")).expect("restored file"),
        "salvaged\n"
    );
    assert_eq!(restored["branch"], format!("grove/restored-{name}"));

    let record = g.record(&id);
    assert_eq!(record["status"], "collected", "{record}");
    assert_eq!(record["keep"], true, "{record}");
    assert_eq!(record["worktree"], restored["worktree"], "{record}");
    let list = g.json(&["list", "--all"]);
    assert!(
        each(&list, "agents").any(|a| a["id"] == id.as_str()),
        "{list}"
    );
    // Its diff is the salvaged work against where it forked from main.
    assert!(g.ok(&["diff", &id]).contains("+salvaged"));

    // Tracked across a restart: the start-up scan does not take it for an orphan.
    g.ok(&["daemon", "restart"]);
    assert_eq!(g.status(&id), "collected");
    assert!(path.join("back.txt").exists());
    assert_eq!(
        g.git(&["for-each-ref", "--format=%(refname)", "refs/grove/salvage/"])
            .lines()
            .count(),
        1,
        "no new orphan salvage"
    );

    // More work in it, then `grove rm`: salvaged onto its branch before it goes.
    fs::write(path.join("more.txt"), "more\n").expect("write");
    g.ok(&["rm", &id]);
    assert!(!path.exists());
    let branch = restored["branch"].as_str().expect("branch");
    assert_eq!(g.file_at(branch, "more.txt"), "more\n");
    assert_eq!(g.file_at(branch, "back.txt"), "salvaged\n");

    // And it merges like an agent's branch.
    g.ok(&["merge", &id]);
    assert_eq!(g.git(&["show", "main:more.txt"]), "more\n");
}

#[test]
fn restoring_an_unknown_ref_is_refused_and_leaves_nothing() {
    let g = Grove::new();
    g.fails(
        &["restore", "no-such-thing"],
        &[
            "no salvage ref `refs/grove/salvage/no-such-thing`",
            "grove salvaged",
        ],
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    assert!(g.worktree_dirs().is_empty());
    let agents_dir = g.home.join("agents");
    let left: Vec<_> = fs::read_dir(&agents_dir)
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
}

#[test]
fn the_same_ref_restored_twice_gets_two_branches_and_two_worktrees() {
    let g = Grove::new();
    let name = discarded_work(&g);
    let first = g.json(&["restore", &name]);
    let second = g.json(&["restore", &name]);
    assert_ne!(first["id"], second["id"]);
    assert_ne!(first["worktree"], second["worktree"]);
    assert_eq!(second["branch"], format!("grove/restored-{name}-2"));
    assert_eq!(g.worktree_dirs().len(), 2);
}

//! Issue 14, items 4, 5 and 12, tried as an attacker would: a jailed agent cannot touch
//! the user's refs, objects or logs (it works in a repository of its own); collect and
//! salvage trust nothing the agent wrote (its `.git`, config, attributes drivers); and
//! what salvage could not save is said, with the worktree kept.

mod support;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use support::*;

fn rev(g: &Grove, name: &str) -> String {
    g.git(&["rev-parse", "-q", "--verify", name])
        .trim()
        .to_string()
}

/// Some loose object file of the user's repository.
fn some_object(git_dir: &Path) -> PathBuf {
    for dir in fs::read_dir(git_dir.join("objects"))
        .expect("objects")
        .flatten()
    {
        let name = dir.file_name().to_string_lossy().into_owned();
        if name.len() == 2 {
            if let Some(file) = fs::read_dir(dir.path()).expect("dir").flatten().next() {
                return file.path();
            }
        }
    }
    panic!("no loose object in {}", git_dir.display());
}

fn env_args(vars: &[(&str, String)]) -> Vec<String> {
    vars.iter()
        .flat_map(|(k, v)| ["--env".to_string(), format!("{k}={v}")])
        .collect()
}

fn spawn_with(g: &Grove, extra: &[&str], vars: &[(&str, String)], script: &str) -> String {
    let env = env_args(vars);
    let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    g.spawn(&args, script)
}

fn sha_of(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_default()
}

/// The user's main and its index are as they were before agent `id` ran, and the
/// work.txt it left is saved on its branch.
fn assert_main_kept_and_work_saved(g: &Grove, id: &str, main: &str, index: &[u8]) {
    assert_eq!(rev(g, "main"), main, "salvage committed onto main");
    assert_eq!(
        sha_of(&g.repo.join(".git/index")),
        index,
        "main index touched"
    );
    assert_eq!(g.agent_file(id, "work.txt"), "work\n");
}

#[test]
fn a_jailed_agent_cannot_move_or_delete_anything_of_the_users_repository() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let common = g.repo.join(".git");
    // Something to aim at: another commit, a sibling agent's branch, a stash.
    g.git(&["checkout", "-q", "-b", "other"]);
    fs::write(g.repo.join("other.txt"), "other\n").expect("write");
    g.git(&["add", "other.txt"]);
    g.git(&["commit", "-qm", "other"]);
    g.git(&["checkout", "-q", "main"]);
    g.git(&["branch", "grove/sibling", "main"]);
    fs::write(g.repo.join("README.md"), "stashed change\n").expect("write");
    g.git(&["stash", "-q"]);
    let (main, other, sibling, stash) = (
        rev(&g, "main"),
        rev(&g, "other"),
        rev(&g, "grove/sibling"),
        rev(&g, "refs/stash"),
    );
    let object = some_object(&common);
    let outside = g.write_file("bashrc", "# the user's\n");
    let script = r#"
        try() { if "$@" 2>/dev/null; then echo "done: $*"; else echo "refused: $*"; fi; }
        try git --git-dir="$COMMON" update-ref refs/heads/main "$OTHER"
        try sh -c 'echo "$OTHER" > "$COMMON/refs/heads/main"'
        try git --git-dir="$COMMON" update-ref refs/heads/grove/sibling "$OTHER"
        try sh -c 'echo "$OTHER" > "$COMMON/refs/heads/grove/sibling"'
        try git -C "$MAIN" stash clear
        try git --git-dir="$COMMON" update-ref -d refs/stash
        try sh -c 'echo "$OTHER" > "$COMMON/refs/stash"'
        try rm -f "$OBJECT"
        try sh -c 'echo junk > "$OBJECT"'
        try git --git-dir="$COMMON" replace "$MAIN_COMMIT" "$OTHER"
        try sh -c 'mkdir -p "$COMMON/refs/replace" && echo "$OTHER" > "$COMMON/refs/replace/$MAIN_COMMIT"'
        try ln -sf "$OUTSIDE" "$COMMON/logs/HEAD"
        try sh -c 'echo "evil subject" >> "$COMMON/logs/HEAD"'
        echo mine > mine.txt && git add mine.txt && git commit -qm 'own commit' && echo committed
        exit 0
    "#;
    let vars = [
        ("COMMON", common.display().to_string()),
        ("MAIN", g.repo.display().to_string()),
        ("OTHER", other.clone()),
        ("MAIN_COMMIT", main.clone()),
        ("OBJECT", object.display().to_string()),
        ("OUTSIDE", outside.display().to_string()),
    ];
    let id = spawn_with(&g, &["--jail"], &vars, script);
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert_eq!(record["outcome"], "succeeded", "{log}");
    assert!(log.contains("committed"), "{log}");

    assert_eq!(rev(&g, "main"), main, "main moved: {log}");
    assert_eq!(rev(&g, "grove/sibling"), sibling, "sibling moved: {log}");
    assert_eq!(rev(&g, "refs/stash"), stash, "stash changed: {log}");
    assert!(object.is_file(), "an object was deleted: {log}");
    assert!(
        !common.join("refs/replace").join(&main).exists(),
        "a replace ref was planted: {log}"
    );
    let logs_head = fs::symlink_metadata(common.join("logs/HEAD")).expect("logs/HEAD");
    assert!(!logs_head.file_type().is_symlink(), "{log}");
    assert!(!sha_of(&common.join("logs/HEAD")).ends_with(b"evil subject\n"));
    assert_eq!(
        fs::read_to_string(&outside).expect("read"),
        "# the user's\n"
    );
    // The user's repository lies below $HOME, which in the view is the agent's private
    // home: an attempt may "go through" on the empty directories the view made there,
    // never on the user's repository (each checked above). Outside $HOME, none does.
    let beneath_home = g.repo.starts_with(g.dir.path());
    assert!(
        beneath_home || !log.contains("done:"),
        "an attempt went through: {log}"
    );
    g.git(&["fsck", "--strict"]);
    assert_eq!(
        g.git(&["show", "-s", "--format=%s", "HEAD"]).trim(),
        "initial",
        "{log}"
    );

    // Its own commit still lands on its branch in the user's repository.
    g.assert_one_commit_on_branch(&id, "own commit", "mine.txt", "mine\n");
    assert_eq!(record["branch_exists"], true);
    assert!(!Path::new(record["worktree"].as_str().expect("path")).exists());
}

/// The agent rewrites its own repository so that a git run on it would run its code:
/// a filter driver in its config, used by `.gitattributes` for every file.
const FILTER_TRAP: &str = r#"
    git config filter.trap.clean "sh -c 'touch \"$MARKER\"; cat'"
    git config filter.trap.smudge "sh -c 'touch \"$MARKER\"; cat'"
    git config core.fsmonitor "touch '$MARKER'; echo"
    mkdir -p .git/hooks && printf '#!/bin/sh\ntouch "%s"\n' "$MARKER" > .git/hooks/post-commit
    chmod +x .git/hooks/post-commit
    echo '* filter=trap' > .gitattributes
    echo work > work.txt
    exit 0
"#;

#[test]
fn collect_runs_no_driver_or_hook_of_a_jailed_agents_repository() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let marker = g.dir.path().join("marker");
    let index = sha_of(&g.repo.join(".git/index"));
    let main = rev(&g, "main");
    let id = spawn_with(
        &g,
        &["--jail"],
        &[("MARKER", marker.display().to_string())],
        FILTER_TRAP,
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{}", g.ok(&["logs", &id]));
    assert!(!marker.exists(), "collect ran the agent's driver or hook");
    // What could be saved is saved, through grove's own view of the files.
    assert_main_kept_and_work_saved(&g, &id, &main, &index);
    assert_eq!(record["salvaged"], true);
    assert_eq!(record["tampered"], false);
}

#[test]
fn a_jailed_agent_whose_git_dir_points_at_the_users_gets_its_files_saved_not_main() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let main = rev(&g, "main");
    let index = sha_of(&g.repo.join(".git/index"));
    let script = r#"
        echo work > work.txt
        rm -rf .git && echo "gitdir: $COMMON" > .git
        exit 0
    "#;
    let common = g.repo.join(".git").display().to_string();
    let id = spawn_with(&g, &["--jail"], &[("COMMON", common)], script);
    let record = g.wait(&id);
    assert_main_kept_and_work_saved(&g, &id, &main, &index);
    assert_eq!(record["tampered"], true, "{record}");
    let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
    assert!(worktree.exists(), "a tampered worktree is kept");
    g.git(&["fsck", "--strict"]);
}

#[test]
fn an_unjailed_worktree_whose_git_layout_was_rewritten_is_kept_and_marked_tampered() {
    let g = Grove::new();
    let marker = g.dir.path().join("marker");
    let main = rev(&g, "main");
    let index = sha_of(&g.repo.join(".git/index"));
    // One points its `.git` at the main repository's git dir, one at a git dir of its
    // own whose config defines a filter driver that `.gitattributes` uses.
    let at_main = r#"
        echo work > work.txt
        echo "gitdir: $COMMON" > .git
        exit 0
    "#;
    let at_trap = r#"
        echo work > work.txt
        git init -q --bare "$PWD/trap.git"
        git --git-dir="$PWD/trap.git" config filter.trap.clean "sh -c 'touch \"$MARKER\"; cat'"
        git --git-dir="$PWD/trap.git" config core.bare false
        echo '* filter=trap' > .gitattributes
        echo "gitdir: $PWD/trap.git" > .git
        exit 0
    "#;
    // And one leaves `.git` alone but points its admin dir's `commondir` elsewhere.
    let commondir = r#"
        echo work > work.txt
        git init -q --bare "$PWD/fake.git"
        git --git-dir="$PWD/fake.git" config filter.trap.clean "sh -c 'touch \"$MARKER\"; cat'"
        echo '* filter=trap' > .gitattributes
        admin=$(sed 's/^gitdir: //' .git)
        echo "$PWD/fake.git" > "$admin/commondir"
        exit 0
    "#;
    let vars = [
        ("COMMON", g.repo.join(".git").display().to_string()),
        ("MARKER", marker.display().to_string()),
    ];
    for script in [at_main, at_trap, commondir] {
        let id = spawn_with(&g, &["--no-jail"], &vars, script);
        let record = g.wait(&id);
        assert_eq!(record["tampered"], true, "{record}");
        let error = record["error"].as_str().unwrap_or_default();
        assert!(error.contains(".git") && error.contains("kept"), "{error}");
        assert!(!marker.exists(), "collect ran the agent's filter driver");
        assert_eq!(rev(&g, "main"), main, "salvage committed onto main");
        assert_eq!(
            sha_of(&g.repo.join(".git/index")),
            index,
            "main index touched"
        );
        let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
        assert!(
            worktree.join("work.txt").exists(),
            "the worktree was not kept"
        );
        // Seen as a failure, and never reported removed.
        let out = g.run(&["wait", &id]);
        assert_ne!(out.code, 0, "{}", out.stdout);
        assert!(out.stdout.contains("tampered"), "{}", out.stdout);
        let out = g.run(&["rm", &id]);
        assert_ne!(out.code, 0, "{}", out.stdout);
        assert!(!out.stdout.contains("removed"), "{}", out.stdout);
        assert!(out.stderr.contains("not removed"), "{}", out.stderr);
        assert!(worktree.exists());
    }
}

#[test]
fn nested_repositories_are_salvaged_file_by_file() {
    let modes = jail_modes();
    let g = Grove::new();
    let script = r#"
        mkdir -p lib/deep && echo top > top.txt
        (cd lib && git init -q && echo l > l.txt && echo d > deep/d.txt)
        (mkdir -p lib/inner && cd lib/inner && git init -q && echo i > i.txt)
        exit 0
    "#;
    for mode in modes {
        let id = g.spawn(mode, script);
        let record = g.wait(&id);
        assert_eq!(record["outcome"], "succeeded", "{record}");
        assert!(record["salvage_error"].is_null(), "{mode:?}: {record}");
        assert_eq!(record["salvaged"], true, "{mode:?}");
        let branch = format!("grove/{id}");
        for (path, content) in [
            ("top.txt", "top\n"),
            ("lib/l.txt", "l\n"),
            ("lib/deep/d.txt", "d\n"),
            ("lib/inner/i.txt", "i\n"),
        ] {
            assert_eq!(g.file_at(&branch, path), content, "{mode:?}");
        }
        let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
        assert!(!worktree.exists(), "{mode:?}: fully salvaged, so removed");
        let out = g.run(&["wait", &id]);
        assert_eq!(out.code, 0, "{}", out.stdout);
    }
}

#[test]
fn a_file_over_the_salvage_cap_keeps_the_worktree_and_every_message_says_so() {
    let modes = jail_modes();
    let g = Grove::new().with_env(&[("GROVE_SALVAGE_MAX_FILE", "1k"), ("GROVE_MAX_IDLE", "1ms")]);
    // A big file already on main that the agent leaves alone is no work left out.
    fs::write(g.repo.join("asset.bin"), vec![7u8; 4096]).expect("write");
    g.git(&["add", "asset.bin"]);
    g.git(&["commit", "-qm", "asset"]);
    // A 4 GiB sparse file: salvage must neither hash it nor hold the lane for it.
    let script = r#"
        truncate -s 4G big.bin && echo small > small.txt
        exit 0
    "#;
    for mode in modes {
        let id = g.spawn(mode, script);
        let record = g.wait(&id);
        let problem = record["salvage_error"].as_str().unwrap_or_default();
        assert!(
            problem.contains("big.bin") && problem.contains("salvage_max_file"),
            "{mode:?}: {record}"
        );
        assert!(!problem.contains("asset.bin"), "{problem}");
        let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
        assert!(
            worktree.join("big.bin").exists(),
            "{mode:?}: worktree not kept"
        );
        // What fit is saved; what did not is not on the branch.
        let branch = format!("grove/{id}");
        assert_eq!(g.file_at(&branch, "small.txt"), "small\n");
        assert!(!g
            .git(&["ls-tree", "--name-only", &branch])
            .contains("big.bin"));

        // list, show and wait all say it failed.
        let out = g.run(&["wait", &id]);
        assert_ne!(out.code, 0, "{}", out.stdout);
        assert!(out.stdout.contains("salvage failed"), "{}", out.stdout);
        assert!(g.ok(&["list", "--all"]).contains("salvage failed"));
        let shown = g.ok(&["show", &id]);
        assert!(shown.contains("big.bin"), "{shown}");

        // `rm` and `gc` never claim a removal that did not happen.
        let out = g.run(&["rm", &id]);
        assert_ne!(out.code, 0, "{}", out.stdout);
        assert!(!out.stdout.contains("removed"), "{}", out.stdout);
        assert!(out.stderr.contains("big.bin"), "{}", out.stderr);
        let gc = g.ok(&["gc"]);
        let gc_removed: Vec<&str> = gc.lines().filter(|l| !l.starts_with("kept: ")).collect();
        assert!(!gc_removed.iter().any(|l| l.contains(&id)), "{gc}");
        assert!(
            gc.lines()
                .any(|l| l.starts_with("kept: ") && l.contains("big.bin")),
            "{gc}"
        );
        assert!(worktree.join("big.bin").exists());
        let after: Value = g.record(&id);
        assert!(after["salvage_error"].is_string());
    }
}

#[test]
fn rm_says_removed_and_where_the_work_is_only_after_both_happened() {
    let g = Grove::new();
    let id = g.spawn(&["--keep"], "echo kept > kept.txt");
    let record = g.wait(&id);
    let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
    assert!(worktree.exists());
    let out = g.ok(&["rm", &id]);
    let branch = format!("grove/{id}");
    assert!(out.contains("removed") && out.contains(&branch), "{out}");
    assert!(!worktree.exists());
    assert_eq!(g.file_at(&branch, "kept.txt"), "kept\n");
}

#[test]
fn a_jailed_agents_child_starts_from_the_agents_own_commits() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    // The parent commits in its own repository; its child (spawned from there, no
    // --base) must see that commit, which grove brings into the user's repository.
    let script = r#"
        echo from-parent > p.txt && git add p.txt && git commit -qm parent-commit || exit 1
        child=$("$GROVE_BIN" spawn -- sh -c 'cat p.txt > seen.txt') || exit 1
        echo "$child" > child.id
        "$GROVE_BIN" wait "$child" > /dev/null; true
    "#;
    let id = spawn_with(&g, &["--jail"], &[("GROVE_BIN", BIN.to_string())], script);
    let (child, child_record) = g.child_of_succeeded(&id);
    assert_eq!(child_record["outcome"], "succeeded", "{child_record}");
    assert_eq!(child_record["base_ref"], format!("grove/{id}"));
    let parent_commit = rev(&g, &format!("grove/{id}~1"));
    assert_eq!(child_record["base_commit"], parent_commit.as_str());
    assert_eq!(g.agent_file(&child, "seen.txt"), "from-parent\n");
    g.git(&["fsck", "--strict"]);
}

#[test]
fn jail_with_sparse_is_refused_clearly_and_leaves_nothing() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    g.refused_all(
        &["spawn", "--jail", "--sparse", "src", "--", "true"],
        &["--sparse", "--jail"],
    );
    assert!(g.worktree_dirs().is_empty());
    assert!(!g.git(&["branch", "--list", "grove/*"]).contains("grove/"));
    assert!(g.ok(&["--json", "list", "--all"]).contains("[]"));
}

#[test]
fn a_crash_during_a_jailed_collect_is_finished_by_the_next_daemon_without_loss() {
    if !have_landlock() {
        return;
    }
    for point in ["mid_salvage", "after_import"] {
        let g = Grove::new();
        let id = g.crash_collecting(
            point,
            &["--jail"],
            "echo committed > c.txt && git add c.txt && git commit -qm own && \
             echo loose > loose.txt",
        );
        assert!(g.daemon_log().contains("crashing on purpose"), "{point}");
        let record = g.wait(&id);
        assert_eq!(record["status"], "collected", "{point}: {record}");
        assert!(record["salvage_error"].is_null(), "{point}: {record}");
        let branch = format!("grove/{id}");
        assert_eq!(g.file_at(&branch, "c.txt"), "committed\n");
        assert_eq!(g.file_at(&branch, "loose.txt"), "loose\n");
        assert_eq!(
            g.git(&["log", "--format=%s", &format!("main..{branch}")])
                .lines()
                .count(),
            2,
            "{point}: one salvage commit on top of the agent's own"
        );
        assert!(g.worktree_dirs().is_empty(), "{point}");
        g.git(&["fsck", "--strict"]);
    }
}

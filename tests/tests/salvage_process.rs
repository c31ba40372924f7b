//! The salvage of an agent's worktree runs in git child processes, on the agent's files:
//! what an agent writes must not steer that git (drivers, links out of the worktree,
//! index flags), and what is saved is what the worktree holds. A worktree with a small
//! index is staged by libgit2 in the daemon instead of by git: every test runs both ways.

mod support;

use std::fs;
use std::path::PathBuf;
use support::*;

fn landlock() -> bool {
    use grove_agent_shim::jail::{kernel_abi, REQUIRED_ABI};
    let abi = kernel_abi();
    let missing = (abi < REQUIRED_ABI)
        .then(|| format!("the kernel's Landlock ABI is {abi}, the jail needs {REQUIRED_ABI}"));
    can_run("landlock", missing)
}

fn modes() -> Vec<&'static [&'static str]> {
    let mut modes: Vec<&'static [&'static str]> = vec![&["--no-jail"]];
    if landlock() {
        modes.push(&["--jail"]);
    }
    modes
}

/// A grove whose salvage reads small indexes in process, and one that leaves every
/// index to git processes.
fn both_ways() -> [Grove; 2] {
    [
        Grove::new(),
        Grove::new().with_env(&[("GROVE_TEST_SALVAGE_IN_PROCESS_BYTES", "0")]),
    ]
}

/// Runs `script` in an unjailed agent and returns its branch once it is collected with
/// nothing left out.
fn salvaged_branch(g: &Grove, script: &str) -> String {
    let id = g.spawn(&["--no-jail"], script);
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected", "{record}");
    assert!(record["salvage_error"].is_null(), "{record}");
    format!("grove/{id}")
}

/// `<mode> <type>` of `path` on `branch`, as `git ls-tree` lists it.
fn entry(g: &Grove, branch: &str, path: &str) -> String {
    let line = g.git(&["ls-tree", branch, "--", path]);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert!(fields.len() >= 2, "{path} is not on {branch}: {line:?}");
    format!("{} {}", fields[0], fields[1])
}

#[test]
fn an_agents_attributes_run_no_driver_and_its_links_out_are_saved_as_links() {
    for g in both_ways() {
        an_agents_attributes_run_no_driver_and_its_links_out_are_saved_as_links_on(&g);
    }
}

fn an_agents_attributes_run_no_driver_and_its_links_out_are_saved_as_links_on(g: &Grove) {
    // The user's own repository defines drivers (as git-lfs or a formatter would): the
    // salvage of an agent's files still runs none of them, even when the agent's
    // `.gitattributes` names them for every file.
    let marker = g.repo.parent().expect("temp dir").join("driver-ran");
    let driver = format!("sh -c 'touch {}; tr a-z A-Z'", marker.display());
    g.git(&["config", "filter.shout.clean", &driver]);
    g.git(&["config", "filter.shout.smudge", &driver]);
    g.git(&["config", "filter.shout.process", &driver]);
    g.git(&["config", "filter.shout.required", "true"]);
    g.git(&["config", "diff.shout.textconv", &driver]);
    let script = r#"
        printf '* filter=shout diff=shout\n' > .gitattributes
        echo raw words > data.txt
        echo more raw >> src/lib.txt
        ln -s /etc/passwd passwd-link
        ln -s / root-link
        mkdir -p deep && ln -s /etc deep/etc-link
        ln -s ../../.. up-link
        printf '#!/bin/sh\n' > tool.sh && chmod +x tool.sh
        exit 0
    "#;
    for mode in modes() {
        let id = g.spawn(mode, script);
        let record = g.wait(&id);
        assert_eq!(record["status"], "collected", "{mode:?}: {record}");
        assert_eq!(record["salvaged"], true, "{mode:?}: {record}");
        let branch = format!("grove/{id}");
        assert!(
            !marker.exists(),
            "{mode:?}: a driver ran on the agent's files"
        );
        // The bytes as the agent wrote them, not through any filter.
        assert_eq!(g.file_at(&branch, "data.txt"), "raw words\n");
        assert_eq!(
            g.file_at(&branch, "src/lib.txt"),
            "one\ntwo\nthree\nmore raw\n"
        );
        // Links are recorded as links, with their target as text; nothing behind one.
        for (link, target) in [
            ("passwd-link", "/etc/passwd"),
            ("root-link", "/"),
            ("deep/etc-link", "/etc"),
            ("up-link", "../../.."),
        ] {
            assert_eq!(entry(g, &branch, link), "120000 blob", "{mode:?}: {link}");
            assert_eq!(g.file_at(&branch, link), target);
        }
        let files = g.git(&["ls-tree", "-r", "--name-only", &branch]);
        assert!(
            !files.lines().any(|f| f.contains("-link/")),
            "{mode:?}: salvage went through a link: {files}"
        );
        assert_eq!(entry(g, &branch, "tool.sh"), "100755 blob", "{mode:?}");
        assert_eq!(entry(g, &branch, "data.txt"), "100644 blob", "{mode:?}");
        let worktree = PathBuf::from(record["worktree"].as_str().expect("path"));
        assert!(!worktree.exists(), "{mode:?}: fully salvaged, so removed");
    }
    assert!(fs::read_to_string("/etc/passwd").is_ok());
}

#[test]
fn work_hidden_behind_index_flags_or_user_excludes_is_handled_as_git_would() {
    for g in both_ways() {
        work_hidden_behind_index_flags_or_user_excludes_is_handled_as_git_would_on(&g);
    }
}

fn work_hidden_behind_index_flags_or_user_excludes_is_handled_as_git_would_on(g: &Grove) {
    // Ignored through the user's info/exclude: not work, as for `git status`.
    fs::write(g.repo.join(".git/info/exclude"), "*.scratch\n").expect("write");
    // An agent that marks files assume-unchanged or skip-worktree and then edits them
    // still has its edits saved: `git add` alone would pass over them.
    let script = r#"
        git update-index --assume-unchanged src/lib.txt
        echo hidden edit >> src/lib.txt
        git update-index --skip-worktree README.md
        echo skipped edit >> README.md
        echo notes > mine.scratch
        echo kept > new.txt
        exit 0
    "#;
    let id = g.spawn(&["--no-jail"], script);
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected", "{record}");
    let branch = format!("grove/{id}");
    assert_eq!(
        g.file_at(&branch, "src/lib.txt"),
        "one\ntwo\nthree\nhidden edit\n"
    );
    assert_eq!(
        g.file_at(&branch, "README.md"),
        "# test repo\nskipped edit\n"
    );
    assert_eq!(g.file_at(&branch, "new.txt"), "kept\n");
    let files = g.git(&["ls-tree", "-r", "--name-only", &branch]);
    assert!(!files.contains("mine.scratch"), "{files}");
    assert_eq!(record["files_changed"], 3, "{record}");
}

#[test]
fn an_agent_that_leaves_head_on_another_branch_keeps_the_branch_and_saves_the_work() {
    for g in both_ways() {
        an_agent_that_leaves_head_on_another_branch_keeps_the_branch_and_saves_the_work_on(&g);
    }
}

fn an_agent_that_leaves_head_on_another_branch_keeps_the_branch_and_saves_the_work_on(g: &Grove) {
    let main = g.git(&["rev-parse", "main"]).trim().to_string();
    let script = r#"
        git checkout -q -b side
        echo side work > side.txt
        git add side.txt && git commit -qm 'on side'
        echo left over > loose.txt
        exit 0
    "#;
    let id = g.spawn(&["--no-jail"], script);
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected", "{record}");
    // Its branch was left alone; HEAD's work, the leftovers on top, is kept aside.
    assert!(g
        .git(&["branch", "--list", &format!("grove/{id}")])
        .is_empty());
    let kept = format!("refs/grove/salvage/{id}");
    assert_eq!(g.file_at(&kept, "loose.txt"), "left over\n");
    assert_eq!(g.file_at(&kept, "side.txt"), "side work\n");
    assert_eq!(
        g.git(&["log", "-1", "--format=%s", &format!("{kept}^")])
            .trim(),
        "on side"
    );
    assert_eq!(g.git(&["rev-parse", "main"]).trim(), main);
}

#[test]
fn a_same_size_edit_in_the_second_of_the_checkout_is_saved() {
    for g in both_ways() {
        a_same_size_edit_in_the_second_of_the_checkout_is_saved_on(&g);
    }
}

/// git tells such an edit from an unchanged file only by reading it, and knows which
/// files to read from its index file's mtime: a copy of the agent's index with a later
/// mtime hid the edit once the collect came a second later.
fn a_same_size_edit_in_the_second_of_the_checkout_is_saved_on(g: &Grove) {
    let script = r#"
        index=$(git rev-parse --git-path index)
        printf 'ONE\ntwo\nthree\n' > src/lib.txt
        touch -r "$index" src/lib.txt
        sleep 1.1
        exit 0
    "#;
    let branch = salvaged_branch(g, script);
    assert_eq!(g.file_at(&branch, "src/lib.txt"), "ONE\ntwo\nthree\n");
}

#[test]
fn an_index_libgit2_cannot_read_is_salvaged_by_git() {
    for g in both_ways() {
        an_index_libgit2_cannot_read_is_salvaged_by_git_on(&g);
    }
}

/// A split index (as `core.splitIndex` or `feature.manyFiles` users have) carries an
/// extension libgit2 refuses: the salvage goes to git instead of failing.
fn an_index_libgit2_cannot_read_is_salvaged_by_git_on(g: &Grove) {
    let script = r#"
        echo split >> src/lib.txt
        git update-index --split-index
        echo new > new.txt
        exit 0
    "#;
    let branch = salvaged_branch(g, script);
    assert_eq!(
        g.file_at(&branch, "src/lib.txt"),
        "one\ntwo\nthree\nsplit\n"
    );
    assert_eq!(g.file_at(&branch, "new.txt"), "new\n");
}

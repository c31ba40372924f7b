//! What a jailed agent puts into the user's repository is budgeted: an object over
//! `salvage_max_file` on its branch (a small object that inflates to megabytes, here)
//! keeps the whole branch out, said in the record, and its own repository is kept so
//! that nothing is lost.

mod support;

use std::fs;
use support::*;

/// A jailed agent that commits `bytes` zeros as big.bin (2 KiB compressed for 2 MiB).
fn commit_zeros(g: &Grove, bytes: u64) -> (String, serde_json::Value) {
    let id = g.spawn(
        &["--jail"],
        &format!("head -c {bytes} /dev/zero > big.bin && git add big.bin && git commit -qm big"),
    );
    let record = g.wait(&id);
    (id, record)
}

#[test]
fn an_object_over_salvage_max_file_keeps_a_jailed_branch_out() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_SALVAGE_MAX_FILE", "1M")]);
    let base = g.git(&["rev-parse", "HEAD"]);
    let (id, record) = commit_zeros(&g, 2 << 20);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let error = record["salvage_error"].as_str().unwrap_or_default();
    assert_holds_all(
        error,
        &[
            "over salvage_max_file",
            "big.bin, 2097152 bytes",
            "nothing of it was brought",
        ],
    );
    // Nothing of it is in the user's repository: not the branch, not the blob.
    assert!(
        !users_repo_has_zeros(&g, 2 << 20),
        "the oversized blob reached the user's objects"
    );
    let tip = g.git(&[
        "rev-parse",
        "--verify",
        "-q",
        &format!("refs/heads/grove/{id}"),
    ]);
    assert!(tip.trim().is_empty() || tip.trim() == base.trim(), "{tip}");
    // Its own repository is kept, with the commit, as the message says.
    let worktree = record["worktree"].as_str().expect("worktree");
    assert!(
        fs::metadata(format!("{worktree}/big.bin")).is_ok(),
        "{record}"
    );
    let log = git_in(
        std::path::Path::new(worktree),
        &["log", "--format=%s", "-1"],
    );
    assert_eq!(log.trim(), "big");

    // The control: under the cap, the same commit comes back as the agent's branch.
    let (id, record) = commit_zeros(&g, 512 << 10);
    assert!(record["salvage_error"].is_null(), "{record}");
    let files = g.git(&["ls-tree", "--name-only", &format!("grove/{id}")]);
    assert!(files.lines().any(|f| f == "big.bin"), "{files}");
}

/// Whether the user's repository holds the blob of `bytes` zeros.
fn users_repo_has_zeros(g: &Grove, bytes: usize) -> bool {
    let zeros = g.write_file("zeros", vec![0u8; bytes]);
    let blob = g.git(&["hash-object", zeros.to_str().expect("utf-8")]);
    std::process::Command::new("git")
        .args(["cat-file", "-e", blob.trim()])
        .current_dir(&g.repo)
        .status()
        .expect("git cat-file")
        .success()
}

/// Each checkpoint's code lands in the user's repository: a file over
/// `salvage_max_file` is left out of it, and the checkpoint says so.
#[test]
fn a_checkpoint_leaves_out_files_over_salvage_max_file() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_SALVAGE_MAX_FILE", "1M")]);
    commit_schema(&g, COUNTER_SCHEMA);
    let id = spawn_in_session_with(
        &g,
        "work",
        &["--jail"],
        r#"head -c 2097152 /dev/zero > big.bin && echo small > small.txt &&
           "$GROVE_BIN" state update count 1"#,
    );
    g.succeeded_log(&id);
    let history = g.json(&["state", "history", "--session", "work"]);
    let code = &history["checkpoints"][0]["code"];
    assert_eq!(
        code["left_out"],
        serde_json::json!(["big.bin"]),
        "{history}"
    );
    let tree = code["tree"].as_str().expect("tree");
    let files = g.git(&["ls-tree", "--name-only", tree]);
    assert!(files.lines().any(|f| f == "small.txt"), "{files}");
    assert!(!files.lines().any(|f| f == "big.bin"), "{files}");
    assert!(
        !users_repo_has_zeros(&g, 2 << 20),
        "the big file's blob is in the user's repository"
    );
    let shown = g.ok(&["state", "code", "--session", "work", "1"]);
    assert!(
        shown.contains("left out (over salvage_max_file): big.bin"),
        "{shown}"
    );
}

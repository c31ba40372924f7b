//! `grove discard` is the daemon's (`agent.discard`, in the repository's lane): the
//! branch goes, its tip stays under a salvage ref, and the record says so.

mod support;

use serde_json::json;
use std::fs;
use support::*;

/// An agent that committed, finished; its id, branch and tip.
fn finished(g: &Grove, script: &str) -> (String, String, String) {
    let id = g.spawn(&[], script);
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{record}");
    let branch = record["branch"].as_str().expect("branch").to_string();
    let tip = g.git(&["rev-parse", &branch]).trim().to_string();
    (id, branch, tip)
}

/// The daemon's record itself (`grove show` also asks git).
fn record(g: &Grove, id: &str) -> serde_json::Value {
    call(&mut client(g), "agent.get", json!({ "id": id })).expect("agent.get")
}

#[test]
fn after_discard_show_says_the_branch_is_gone_and_its_tip_is_under_salvage() {
    let g = Grove::new();
    let (id, branch, tip) = finished(&g, "echo d > d.txt && git add d.txt && git commit -qm d");
    assert_eq!(record(&g, &id)["branch_exists"], true);

    let out = g.json(&["discard", &id, "--yes"]);
    let salvage_ref = format!("refs/grove/salvage/discarded-{id}");
    assert_eq!(out["salvage_ref"], salvage_ref.as_str(), "{out}");
    assert_eq!(out["commit"], tip.as_str(), "{out}");

    assert_eq!(g.git(&["branch", "--list", &branch]).trim(), "");
    assert_eq!(g.git(&["rev-parse", &salvage_ref]).trim(), tip);
    assert_eq!(
        record(&g, &id)["branch_exists"],
        false,
        "the record learned it"
    );
    let shown = g.ok(&["show", &id]);
    assert!(
        shown.contains("discarded") && shown.contains(&salvage_ref),
        "{shown}"
    );
    assert_eq!(g.json(&["show", &id])["branch_exists"], false);

    // Nothing left to discard: a clear error, nothing changes.
    g.refused(&["discard", &id, "--yes"], "no branch");
    assert_eq!(g.git(&["rev-parse", &salvage_ref]).trim(), tip);
}

#[test]
fn discard_refuses_a_branch_checked_out_elsewhere_and_changes_nothing() {
    let g = Grove::new();
    let (id, branch, tip) = finished(&g, "echo e > e.txt && git add e.txt && git commit -qm e");
    let elsewhere = g.dir.path().join("elsewhere");
    g.git(&[
        "worktree",
        "add",
        "-q",
        elsewhere.to_str().expect("utf8"),
        &branch,
    ]);

    g.refused_all(&["discard", &id, "--yes"], &["checked out", "elsewhere"]);
    assert_eq!(g.git(&["rev-parse", &branch]).trim(), tip);
    let salvage = format!("refs/grove/salvage/discarded-{id}");
    assert_eq!(
        g.git(&["for-each-ref", &salvage]).trim(),
        "",
        "no salvage ref written"
    );
    assert_eq!(record(&g, &id)["branch_exists"], true);

    // Once the worktree is gone the discard goes through.
    fs::remove_dir_all(&elsewhere).expect("rm worktree");
    g.git(&["worktree", "prune"]);
    g.ok(&["discard", &id, "--yes"]);
    assert_eq!(record(&g, &id)["branch_exists"], false);
}

/// A branch deleted with git behind grove's back: discard says there is nothing to
/// discard, and the record learns the branch is gone.
#[test]
fn discarding_a_branch_git_deleted_tells_the_record() {
    let g = Grove::new();
    let (id, branch, _) = finished(&g, "echo f > f.txt && git add f.txt && git commit -qm f");
    g.git(&["branch", "-D", &branch]);
    assert_eq!(record(&g, &id)["branch_exists"], true);
    g.refused(&["discard", &id, "--yes"], "no branch");
    assert_eq!(record(&g, &id)["branch_exists"], false);
}

#[test]
fn discard_merged_goes_through_the_daemon_too() {
    let g = Grove::new();
    let (id, branch, _) = finished(&g, "echo m > m.txt && git add m.txt && git commit -qm m");
    g.git(&["merge", "-q", "--ff-only", &branch]);
    let out = g.json(&["discard", "--merged", "--yes"]);
    assert_eq!(out["discarded"][0]["id"], id.as_str(), "{out}");
    assert_eq!(record(&g, &id)["branch_exists"], false);
    assert_eq!(g.git(&["branch", "--list", &branch]).trim(), "");
}

/// An agent may kill the agents it spawned, but not delete their branches in the
/// user's repository through grove: the daemon refuses, and the branch stays.
#[test]
fn an_agent_cannot_have_grove_discard_its_childs_branch() {
    let g = Grove::new();
    let out = g.make_dir("out");
    let bin = format!("GROVE_BIN={BIN}");
    let script = format!(
        r#"child=$("$GROVE_BIN" spawn -- sh -c 'echo c > c.txt && git add c.txt && git commit -qm c') || exit 9
        "$GROVE_BIN" wait "$child" > /dev/null
        echo "$child" > {out}/child-id
        "$GROVE_BIN" discard "$child" --yes 2> {out}/discard.err
        echo $? > {out}/discard.code"#,
        out = out.display()
    );
    let parent = g.spawn(&["--env", &bin], &script);
    g.wait(&parent);
    let log = g.ok(&["logs", &parent]);
    let child = fs::read_to_string(out.join("child-id")).unwrap_or_else(|_| panic!("{log}"));
    let child = child.trim();
    let code = fs::read_to_string(out.join("discard.code")).expect("code");
    let err = fs::read_to_string(out.join("discard.err")).unwrap_or_default();
    assert_eq!(code.trim(), "4", "refused: {err}");
    assert!(err.contains("only the user"), "{err}");
    let branch = record(&g, child)["branch"]
        .as_str()
        .expect("branch")
        .to_string();
    assert!(!g.git(&["branch", "--list", &branch]).trim().is_empty());
    assert_eq!(record(&g, child)["branch_exists"], true);
}

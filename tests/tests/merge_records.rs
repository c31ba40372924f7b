//! grove records the merges it makes, `--squash` and `--rebase` included (git cannot see
//! those), so that a second merge, `review`, `overlaps` and the suggested order treat
//! such a branch as merged; `merge --delete`; the order lists only finished, succeeded
//! agents.

mod support;

use serde_json::Value;
use support::*;

fn grove_with_identity() -> Grove {
    let g = Grove::new();
    g.git(&["config", "user.name", "Test User"]);
    g.git(&["config", "user.email", "user@example.invalid"]);
    g
}

fn done(g: &Grove, args: &[&str], script: &str) -> String {
    let id = g.spawn(args, script);
    g.wait(&id);
    id
}

fn reviewed(g: &Grove, args: &[&str]) -> Vec<String> {
    listed_ids(g, "review", args)
}

#[test]
fn a_squashed_or_rebased_branch_counts_as_merged_and_is_not_merged_twice() {
    let g = grove_with_identity();
    let squashed = done(&g, &[], "echo one > ONE.txt");
    let rebased = done(&g, &[], "echo two > TWO.txt");
    assert_eq!(reviewed(&g, &[]).len(), 2);

    let first = g.json(&["merge", "--squash", &squashed]);
    assert_eq!(first["result"], "merged", "{first}");
    let main = g.git(&["rev-parse", "main"]);
    let again = g.json(&["merge", &squashed]);
    assert_eq!(again["result"], "up_to_date", "{again}");
    assert_eq!(g.git(&["rev-parse", "main"]), main, "no empty merge commit");
    assert_eq!(
        g.git(&["rev-parse", &format!("refs/grove/merged/main/{squashed}")])
            .trim(),
        g.record(&squashed)["head_commit"].as_str().unwrap_or(""),
        "the record names the tip that went in"
    );

    assert_eq!(g.json(&["merge", "--rebase", &rebased])["result"], "merged");
    let main = g.git(&["rev-parse", "main"]);
    assert_eq!(
        g.json(&["merge", "--squash", &rebased])["result"],
        "up_to_date"
    );
    assert_eq!(g.git(&["rev-parse", "main"]), main);

    assert!(reviewed(&g, &[]).is_empty(), "review hides merged branches");
    let all = reviewed(&g, &["--all"]);
    assert!(all.contains(&squashed) && all.contains(&rebased), "{all:?}");
}

#[test]
fn overlaps_and_the_suggested_order_skip_merged_failed_and_live_agents() {
    let g = grove_with_identity();
    let squashed = done(&g, &[], "echo mine > SHARED.txt");
    let other = done(&g, &[], "echo theirs > SHARED.txt");
    let overlaps = g.json(&["overlaps"]);
    assert!(
        !overlaps["files"].as_array().expect("files").is_empty(),
        "{overlaps}"
    );
    g.json(&["merge", "--squash", &squashed]);
    let overlaps = g.json(&["overlaps"]);
    assert_eq!(
        overlaps["files"],
        serde_json::json!([]),
        "a squashed branch collides with nothing: {overlaps}"
    );

    let failed = done(&g, &[], "echo bad > BAD.txt; exit 1");
    let live = g.spawn(&[], "echo live > LIVE.txt; sleep 60");
    let good = done(&g, &[], "echo good > GOOD.txt");
    let merged = g.json(&["merge", &good]);
    let order: Vec<&str> = each(&merged, "order")
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert_eq!(order, [other.as_str()], "{merged}");
    assert!(!order.contains(&failed.as_str()) && !order.contains(&live.as_str()));
    g.ok(&["kill", &live]);
}

#[test]
fn merge_delete_removes_the_branch_and_the_record_keeps_its_tip() {
    let g = grove_with_identity();
    let id = done(&g, &[], "echo gone > GONE.txt");
    let record: Value = g.record(&id);
    let branch = record["branch"].as_str().expect("branch").to_string();
    let tip = g.git(&["rev-parse", &branch]);
    let merged = g.json(&["merge", "--squash", "--delete", &id]);
    assert_eq!(merged["deleted"], "deleted", "{merged}");
    assert!(g.git(&["branch", "--list", &branch]).trim().is_empty());
    assert_eq!(
        g.git(&["rev-parse", &format!("refs/grove/merged/main/{id}")]),
        tip
    );
    assert!(g.repo.join("GONE.txt").exists());
}

#[test]
fn discard_merged_drops_every_merged_branch_and_keeps_their_tips() {
    let g = grove_with_identity();
    let squashed = done(&g, &[], "echo s > S.txt");
    let plain = done(&g, &[], "echo p > P.txt");
    let pending = done(&g, &[], "echo u > U.txt");
    g.json(&["merge", "--squash", &squashed]);
    g.json(&["merge", &plain]);
    // Without a terminal to ask on, it needs --yes, and changes nothing.
    g.refused(&["discard", "--merged"], "--yes");
    assert_eq!(reviewed(&g, &["--all"]).len(), 3);

    let out = g.json(&["discard", "--merged", "--yes"]);
    let mut gone: Vec<&str> = each(&out, "discarded")
        .filter_map(|d| d["id"].as_str())
        .collect();
    gone.sort_unstable();
    let mut want = vec![squashed.as_str(), plain.as_str()];
    want.sort_unstable();
    assert_eq!(gone, want, "{out}");
    for id in [&squashed, &plain] {
        assert!(!g
            .git(&["rev-parse", &format!("refs/grove/salvage/discarded-{id}")])
            .trim()
            .is_empty());
    }
    assert_eq!(reviewed(&g, &["--all"]), [pending]);
}

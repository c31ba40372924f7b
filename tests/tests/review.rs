//! Review and merge through the real binary: agents' branches back into the main line,
//! with git's own machinery, and collisions seen before they happen.

mod support;

use serde_json::Value;
use std::fs;
use support::*;

/// Spawns all the scripts as named agents, then waits for them; returns (id, branch) each.
fn agents(g: &Grove, scripts: &[(&str, &str)]) -> Vec<(String, String)> {
    let ids: Vec<String> = scripts
        .iter()
        .map(|(name, script)| g.spawn(&["--name", name], script))
        .collect();
    ids.into_iter()
        .map(|id| {
            let record = g.wait(&id);
            assert_eq!(record["outcome"], "succeeded", "{record}");
            assert_eq!(record["branch_exists"], true, "{record}");
            let branch = record["branch"].as_str().expect("branch").to_string();
            (id, branch)
        })
        .collect()
}

fn tip(g: &Grove, rev: &str) -> String {
    g.git(&["rev-parse", rev]).trim().to_string()
}

fn by_id<'a>(list: &'a Value, id: &str) -> &'a Value {
    list.as_array()
        .expect("array")
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {list}"))
}

#[test]
fn agents_on_different_files_merge_cleanly_in_any_order() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[
            (
                "docs",
                "echo 'more docs' >> README.md && git commit -qam 'docs: more'",
            ),
            (
                "code",
                "echo four >> src/lib.txt && git commit -qam 'code: four'",
            ),
        ],
    );
    let ((docs, docs_branch), (code, code_branch)) = (&ags[0], &ags[1]);

    let review = g.json(&["review"]);
    let listed: Vec<&str> = each(&review, "agents")
        .map(|a| a["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, [code.as_str(), docs.as_str()], "newest first");
    for a in review["agents"].as_array().expect("agents") {
        assert_eq!(a["base"], "main");
        assert_eq!(a["ahead"], 1);
        assert_eq!(a["behind"], 0);
        assert_eq!(a["files_changed"], 1);
        assert_eq!(a["insertions"], 1);
        assert_eq!(a["report"], Value::Null);
    }
    let text = g.ok(&["review"]);
    assert!(
        text.contains(docs_branch.as_str()) && text.contains(code_branch.as_str()),
        "{text}"
    );

    let detail = g.json(&["review", docs]);
    assert_eq!(detail["commits"].as_array().expect("commits").len(), 1);
    assert_eq!(detail["commits"][0]["subject"], "docs: more");
    assert!(detail["diffstat"]
        .as_str()
        .expect("diffstat")
        .contains("README.md"));
    let text = g.ok(&["review", docs]);
    assert!(
        text.contains("docs: more") && text.contains("1 file changed"),
        "{text}"
    );

    assert!(g.ok(&["diff", docs]).contains("+more docs"));
    let stat = g.ok(&["diff", code, "--stat"]);
    assert!(
        stat.contains("src/lib.txt") && !stat.contains("+four"),
        "{stat}"
    );
    assert_eq!(g.ok(&["diff", docs, "--", "src"]), "");
    assert_eq!(g.json(&["diff", code])["branch"], code_branch.as_str());

    assert_eq!(g.json(&["overlaps"])["files"], serde_json::json!([]));

    // The second agent first: order does not matter when nothing overlaps.
    let start = tip(&g, "main");
    let out = g.ok(&["merge", code]);
    assert!(
        out.contains(&format!("merged {code_branch} into main")),
        "{out}"
    );
    assert!(
        out.contains(docs.as_str()),
        "suggests the remaining one: {out}"
    );
    assert_eq!(tip(&g, "main^1"), start);
    assert_eq!(tip(&g, "main^2"), tip(&g, code_branch));
    let behind = g.json(&["review", docs]);
    assert_eq!(
        (behind["ahead"].clone(), behind["behind"].clone()),
        (1.into(), 2.into())
    );

    let out = g.ok(&["merge", docs]);
    assert!(out.contains("no other unmerged agent branches"), "{out}");
    assert_eq!(
        g.git(&["rev-list", "--merges", "--count", "main"]).trim(),
        "2"
    );
    assert_eq!(
        fs::read_to_string(g.repo.join("README.md")).expect("read"),
        "# test repo\nmore docs\n"
    );
    assert_eq!(
        fs::read_to_string(g.repo.join("src/lib.txt")).expect("read"),
        "one\ntwo\nthree\nfour\n"
    );
    assert_eq!(g.git(&["status", "--porcelain"]), "");
    assert_eq!(g.git_worktree_count(), 1);
    // Merging again changes nothing.
    assert_eq!(g.json(&["merge", docs])["result"], "up_to_date");
}

#[test]
fn same_lines_conflict_is_reported_and_changes_nothing() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[
            (
                "left",
                "printf 'one\\nTWO-left\\nthree\\n' > src/lib.txt && git commit -qam left",
            ),
            (
                "right",
                "printf 'one\\nTWO-right\\nthree\\n' > src/lib.txt && git commit -qam right",
            ),
        ],
    );
    let ((left, left_branch), (right, right_branch)) = (&ags[0], &ags[1]);

    // The radar sees it coming.
    let radar = g.json(&["overlaps", "--hunks"]);
    let files = radar["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{radar}");
    assert_eq!(files[0]["path"], "src/lib.txt");
    assert_eq!(files[0]["lines_overlap"], true);
    assert_eq!(files[0]["base_changed"], false);
    for id in [left, right] {
        let agent = by_id(&files[0]["agents"], id);
        assert_eq!(
            agent["hunks"],
            serde_json::json!([{"start": 2, "count": 1}])
        );
    }

    let out = g.ok(&["merge", left]);
    assert!(out.contains(right.as_str()), "{out}");
    let head = tip(&g, "HEAD");
    let tips = (tip(&g, left_branch), tip(&g, right_branch));
    for mode in MERGE_MODES {
        merge_in(&g, right, mode)
            .assert_exit(1, &["src/lib.txt", left_branch, "nothing was changed"]);
        assert_eq!(g.git(&["status", "--porcelain"]), "", "{mode:?}");
        assert_eq!(tip(&g, "HEAD"), head, "{mode:?}");
        assert_eq!(g.git(&["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
        assert_eq!((tip(&g, left_branch), tip(&g, right_branch)), tips);
        assert_eq!(g.git_worktree_count(), 1, "{mode:?}");
    }
    let out = g.run(&["--json", "merge", right]);
    assert_eq!(out.code, 1);
    let report: Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(report["result"], "conflict");
    assert_eq!(report["conflicts"][0]["path"], "src/lib.txt");
    assert_eq!(
        report["conflicts"][0]["also_changed_by"][0]["id"],
        left.as_str()
    );
    assert_eq!(g.git(&["status", "--porcelain"]), "");
}

#[test]
fn squash_and_rebase_give_the_expected_history() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[
            (
                "multi",
                "echo 1 > a.txt && git add a.txt && git commit -qm 'a one' && \
                 echo 2 >> a.txt && git commit -qam 'a two'",
            ),
            (
                "line",
                "echo 1 > b.txt && git add b.txt && git commit -qm 'b one' && \
                 echo 2 >> b.txt && git commit -qam 'b two'",
            ),
        ],
    );
    let ((multi, multi_branch), (line, line_branch)) = (&ags[0], &ags[1]);
    let start = tip(&g, "main");
    let multi_tip = tip(&g, multi_branch);
    // The user's config applies, and must not break the squash.
    g.git(&["config", "merge.ff", "false"]);

    let out = g.ok(&["merge", multi, "--squash"]);
    assert!(out.contains("squashed"), "{out}");
    assert_eq!(
        g.git(&["rev-list", "--count", &format!("{start}..main")])
            .trim(),
        "1"
    );
    assert_eq!(
        g.git(&["log", "-1", "--format=%P", "main"]).trim(),
        start,
        "one parent"
    );
    assert!(g
        .git(&["log", "-1", "--format=%s", "main"])
        .starts_with(&format!("Squash-merge branch '{multi_branch}'")));
    assert_eq!(g.git(&["show", "main:a.txt"]), "1\n2\n");
    assert_eq!(
        tip(&g, multi_branch),
        multi_tip,
        "the branch is kept as it was"
    );
    let squashed = tip(&g, "main");
    // Its changes are in: a second squash has nothing to do.
    assert_eq!(
        g.json(&["merge", multi, "--squash"])["result"],
        "up_to_date"
    );

    let report = g.json(&["merge", line, "--rebase"]);
    assert_eq!(report["result"], "merged");
    assert_eq!(tip(&g, "main"), tip(&g, line_branch), "fast-forwarded");
    assert_eq!(report["commit"], tip(&g, "main").as_str());
    assert_eq!(
        g.git(&["rev-list", "--merges", "--count", "main"]).trim(),
        "0"
    );
    assert_eq!(
        g.git(&["log", "--format=%s", &format!("{squashed}..main")]),
        "b two\nb one\n"
    );
    assert_eq!(tip(&g, "main~2"), squashed, "linear on top of the squash");
    assert_eq!(g.git(&["show", "main:b.txt"]), "1\n2\n");
    assert_eq!(g.git(&["status", "--porcelain"]), "");
    assert_eq!(g.git_worktree_count(), 1, "the temporary worktree is gone");
}

#[test]
fn overlap_radar_lists_shared_files_lines_and_base_changes() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[
            (
                "a",
                "echo 'by a' >> README.md && printf 'ONE-a\\ntwo\\nthree\\n' > src/lib.txt && \
                 git commit -qam a",
            ),
            (
                "b",
                "printf '# b repo\\n' > README.md && printf 'one\\ntwo\\nTHREE-b\\n' > src/lib.txt && \
                 git commit -qam b",
            ),
            ("c", "echo c > c.txt && git add c.txt && git commit -qm c"),
        ],
    );
    let ((a, _), (b, _), (c, _)) = (&ags[0], &ags[1], &ags[2]);
    // The base moves on under one of the shared files.
    fs::write(g.repo.join("src/lib.txt"), "one\ntwo\nthree\nfour\n").expect("write");
    g.git(&["commit", "-qam", "main: four"]);

    let radar = g.json(&["overlaps", "--hunks"]);
    let files = radar["files"].as_array().expect("files");
    let paths: Vec<&str> = files
        .iter()
        .map(|f| f["path"].as_str().expect("path"))
        .collect();
    assert_eq!(paths, ["README.md", "src/lib.txt"], "{radar}");
    let hunks = |file: &Value, id: &str| by_id(&file["agents"], id)["hunks"].clone();
    let (readme, lib) = (&files[0], &files[1]);
    assert_eq!(readme["agents"].as_array().expect("agents").len(), 2);
    assert_eq!(readme["base_changed"], false);
    assert_eq!(readme["lines_overlap"], true);
    assert_eq!(
        hunks(readme, a),
        serde_json::json!([{"start": 1, "count": 0}])
    );
    assert_eq!(
        hunks(readme, b),
        serde_json::json!([{"start": 1, "count": 1}])
    );
    assert_eq!(lib["base_changed"], true);
    assert_eq!(lib["lines_overlap"], false);
    assert_eq!(by_id(&lib["agents"], a)["base_changed"], true);
    assert_eq!(hunks(lib, a), serde_json::json!([{"start": 1, "count": 1}]));
    assert_eq!(hunks(lib, b), serde_json::json!([{"start": 3, "count": 1}]));

    let text = g.ok(&["overlaps", "--hunks"]);
    assert!(text.contains("README.md (same lines)"), "{text}");
    assert!(
        text.contains("main changed it too") && text.contains("after 1"),
        "{text}"
    );
    assert!(!text.contains(c.as_str()), "{text}");
    let plain = g.json(&["overlaps"]);
    assert!(
        plain["files"][0]["agents"][0].get("hunks").is_none(),
        "{plain}"
    );

    // Cached per commit pair; a second look gives the same answer.
    let cache = fs::read_to_string(g.home.join("overlaps-cache.json")).expect("cache");
    assert!(cache.contains(&tip(&g, "main")), "{cache}");
    assert_eq!(g.json(&["overlaps", "--hunks"]), radar);

    // Once a is merged, b touches nothing anyone else unmerged does; c, whose base did
    // not move under it, is suggested first.
    let report = g.json(&["merge", a]);
    assert_eq!(report["result"], "merged");
    let order: Vec<&str> = each(&report, "order")
        .map(|n| n["id"].as_str().expect("id"))
        .collect();
    assert_eq!(order, [c.as_str(), b.as_str()]);
    assert_eq!(g.json(&["overlaps"])["files"], serde_json::json!([]));
}

#[test]
fn merge_into_a_dirty_checkout_is_refused_and_changes_nothing() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[(
            "x",
            "echo x > x.txt && echo more >> README.md && git add x.txt README.md && git commit -qm x",
        )],
    );
    let (id, branch) = &ags[0];
    let head = tip(&g, "HEAD");
    let branch_tip = tip(&g, branch);

    // Only what the merge would write stands in the way: here x.txt, untracked.
    fs::write(g.repo.join("x.txt"), "wip\n").expect("write");
    g.refused_all(&["merge", id], &["uncommitted changes", "untracked: x.txt"]);
    assert_eq!(
        fs::read_to_string(g.repo.join("x.txt")).ok().as_deref(),
        Some("wip\n")
    );
    fs::remove_file(g.repo.join("x.txt")).expect("rm");
    fs::write(g.repo.join("README.md"), "edited\n").expect("write");
    for mode in ["--squash", "--rebase"] {
        g.refused(&["merge", id, mode], "README.md");
    }
    assert_eq!(g.git(&["status", "--porcelain"]), " M README.md\n");
    assert_eq!(tip(&g, "HEAD"), head);
    assert_eq!(tip(&g, branch), branch_tip);
    assert!(!g.repo.join("x.txt").exists());
    assert_eq!(g.git_worktree_count(), 1);
}

#[test]
fn merge_into_another_worktree_or_a_branch_checked_out_nowhere() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[("x", "echo x > x.txt && git add x.txt && git commit -qm x")],
    );
    let (id, _) = &ags[0];
    let head = tip(&g, "HEAD");

    let release = g.dir.path().join("release");
    g.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "release",
        release.to_str().expect("path"),
    ]);
    fs::write(release.join("x.txt"), "wip\n").expect("write");
    g.refused(&["merge", id, "--into", "release"], "x.txt");
    assert_eq!(tip(&g, "release"), head);

    fs::remove_file(release.join("x.txt")).expect("rm");
    let out = g.run(&["merge", id, "--into", "release"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("checked out in {}", release.display())),
        "says where: {}",
        out.stderr
    );
    assert!(release.join("x.txt").exists());
    assert_eq!(
        g.git(&["log", "-1", "--format=%P", "release"])
            .split(' ')
            .count(),
        2
    );
    assert_eq!(tip(&g, "HEAD"), head, "main untouched");

    g.git(&["branch", "stable", &head]);
    let report = g.json(&["merge", id, "--into", "stable", "--squash"]);
    assert_eq!(report["result"], "merged");
    assert_eq!(report["temporary"], true);
    assert_eq!(g.git(&["show", "stable:x.txt"]), "x\n");
    assert_eq!(tip(&g, "stable~1"), head);
    assert_eq!(tip(&g, "HEAD"), head, "main untouched");
    assert_eq!(g.git_worktree_count(), 2, "only main and release remain");
    assert_eq!(g.git(&["status", "--porcelain"]), "");
}

#[test]
fn discard_needs_confirmation_and_keeps_the_tip_reachable() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[(
            "gone",
            "echo g > g.txt && git add g.txt && git commit -qm g",
        )],
    );
    let (id, branch) = &ags[0];
    let branch_tip = tip(&g, branch);

    g.refused(&["discard", id], "--yes");
    assert_eq!(tip(&g, branch), branch_tip);

    let out = g.ok(&["discard", id, "--yes"]);
    assert!(
        out.contains(&format!("refs/grove/salvage/discarded-{id}")),
        "{out}"
    );
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
    assert_eq!(
        tip(&g, &format!("refs/grove/salvage/discarded-{id}")),
        branch_tip
    );
    assert_eq!(g.json(&["review"])["agents"], serde_json::json!([]));
    assert_eq!(g.run(&["merge", id]).code, 2);
    // `grove show` asks git, not only the record.
    assert_eq!(g.json(&["show", id])["branch_exists"], false);
    assert!(g.ok(&["show", id]).contains("discarded"));
}

/// `grove merge` run from inside a git hook of another repository (GIT_DIR and
/// GIT_INDEX_FILE set, as git sets them for hooks) acts on the repository it was asked
/// about, never on the hook's.
#[test]
fn merge_from_inside_another_repositorys_hook_touches_only_its_own_repository() {
    let g = Grove::new();
    let ags = agents(
        &g,
        &[("x", "echo x > x.txt && git add x.txt && git commit -qm x")],
    );
    let (id, branch) = &ags[0];
    let other = g.make_dir("other");
    init_repo(&other);
    let other_head = git_in(&other, &["rev-parse", "HEAD"]);
    let other_index = fs::read(other.join(".git/index")).expect("index");
    let git_dir = other.join(".git");
    let index = other.join(".git/index");
    let out = g.run_env(
        &["merge", id],
        &[
            ("GIT_DIR", git_dir.to_str().expect("utf8")),
            ("GIT_INDEX_FILE", index.to_str().expect("utf8")),
        ],
    );
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(g.repo.join("x.txt").exists());
    assert_eq!(
        g.git(&["merge-base", "--is-ancestor", branch, "HEAD"]),
        String::new()
    );
    assert_eq!(git_in(&other, &["rev-parse", "HEAD"]), other_head);
    assert_eq!(
        fs::read(other.join(".git/index")).expect("index"),
        other_index
    );
    assert!(!other.join("x.txt").exists());
}

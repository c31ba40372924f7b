//! `grove diff` and `agent.diff` on a running agent: what its worktree holds now
//! (commits, staged, unstaged and untracked files) against the commit it started from,
//! read without touching the agent's own index.

mod support;

use std::time::Duration;
use support::*;

#[test]
fn diff_of_a_running_agent_shows_its_worktree_now_and_leaves_its_index_alone() {
    let g = Grove::new();
    let script = r#"
        echo committed > COMMITTED.txt && git add COMMITTED.txt && git commit -qm work
        echo staged > STAGED.txt && git add STAGED.txt
        echo changed >> README.md
        echo untracked > UNTRACKED.txt
        echo skipped > cache.ignored
        touch ready.ignored
        sleep 60"#;
    let id = g.spawn(
        &[
            "--env",
            "GIT_AUTHOR_NAME=A",
            "--env",
            "GIT_AUTHOR_EMAIL=a@x",
            "--env",
            "GIT_COMMITTER_NAME=A",
            "--env",
            "GIT_COMMITTER_EMAIL=a@x",
        ],
        script,
    );
    let worktree = std::path::PathBuf::from(
        g.record(&id)["worktree"]
            .as_str()
            .expect("worktree")
            .to_string(),
    );
    eventually(
        "the agent made its changes",
        Duration::from_secs(20),
        || worktree.join("ready.ignored").exists(),
    );
    let status_before = git_in(&worktree, &["status", "--porcelain"]);

    let diff = g.ok(&["diff", &id]);
    for wanted in ["+committed", "+staged", "+changed", "+untracked"] {
        assert!(diff.contains(wanted), "{wanted} missing from:\n{diff}");
    }
    assert!(!diff.contains("skipped"), "ignored files stay out:\n{diff}");
    let stat = g.ok(&["diff", "--stat", &id]);
    assert!(stat.contains("4 files changed"), "{stat}");
    let json = g.json(&["diff", &id]);
    assert_eq!(
        json["diff"].as_str(),
        Some(diff.as_str()),
        "one definition for both"
    );
    let only = g.ok(&["diff", &id, "--", "README.md"]);
    assert!(
        only.contains("+changed") && !only.contains("+untracked"),
        "{only}"
    );

    assert_eq!(
        git_in(&worktree, &["status", "--porcelain"]),
        status_before,
        "the agent's index is as it left it"
    );
    g.ok(&["kill", &id]);
}

#[test]
fn a_jailed_agent_cannot_make_the_live_diff_run_its_filter_outside_the_jail() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    let marker = g.dir.path().join("filter-ran");
    // The agent's repository is its own: it names a clean filter there, which `git add`
    // would run as the user, outside the jail, if grove read its worktree with it.
    let script = format!(
        r#"git config filter.evil.clean "touch {marker}; cat"
        echo '*.txt filter=evil' > .gitattributes
        echo bait > BAIT.txt
        touch ready.ignored
        sleep 60"#,
        marker = marker.display()
    );
    let id = g.spawn(&["--jail"], &script);
    let worktree = std::path::PathBuf::from(
        g.record(&id)["worktree"]
            .as_str()
            .expect("worktree")
            .to_string(),
    );
    eventually("the agent set its trap", Duration::from_secs(20), || {
        worktree.join("ready.ignored").exists()
    });
    assert!(
        git_in(&worktree, &["config", "--get", "filter.evil.clean"]).contains("touch"),
        "the trap is set"
    );
    let out = g.run(&["diff", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!marker.exists(), "the agent's filter ran outside its jail");
    assert!(!out.stdout.contains("BAIT"), "{}", out.stdout);
    g.ok(&["kill", &id]);
    g.wait(&id);
    assert!(!marker.exists(), "the agent's filter ran outside its jail");
}

#[test]
fn overlaps_sees_running_agents_uncommitted_and_untracked_changes() {
    let g = Grove::new();
    let a = g.spawn(
        &[],
        "echo a >> src/lib.txt; echo a > NEW.txt; touch ready.ignored; sleep 60",
    );
    let b = g.spawn(
        &[],
        "echo b >> src/lib.txt; echo b > NEW.txt; touch ready.ignored; sleep 60",
    );
    let c = g.spawn(&[], "echo c > OTHER.txt; touch ready.ignored; sleep 60");
    for id in [&a, &b, &c] {
        let worktree = std::path::PathBuf::from(
            g.record(id)["worktree"]
                .as_str()
                .expect("worktree")
                .to_string(),
        );
        eventually("the agent wrote", Duration::from_secs(20), || {
            worktree.join("ready.ignored").exists()
        });
    }
    let overlaps = g.json(&["overlaps", "--hunks"]);
    let files: Vec<(String, Vec<String>)> = each(&overlaps, "files")
        .map(|f| {
            let mut ids: Vec<String> = each(f, "agents")
                .filter_map(|x| x["id"].as_str().map(String::from))
                .collect();
            ids.sort();
            (f["path"].as_str().unwrap_or("").to_string(), ids)
        })
        .collect();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(
        files,
        [
            ("NEW.txt".to_string(), both.clone()),
            ("src/lib.txt".to_string(), both)
        ],
        "{overlaps}"
    );
    for id in [&a, &b, &c] {
        g.ok(&["kill", id]);
    }
}

#[test]
fn a_repeated_live_diff_follows_every_change_and_its_scratch_index_goes_at_collect() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "echo aaa >> README.md", "");
    let worktree = std::path::PathBuf::from(
        g.record(&id)["worktree"]
            .as_str()
            .expect("worktree")
            .to_string(),
    );
    let readme = worktree.join("README.md");
    eventually(
        "the agent edited README.md",
        Duration::from_secs(20),
        || std::fs::read_to_string(&readme).is_ok_and(|t| t.contains("aaa")),
    );
    let first = g.ok(&["diff", &id]);
    assert!(first.contains("+aaa"), "{first}");
    assert_eq!(g.ok(&["diff", &id]), first, "nothing changed, same answer");

    // The same size, in place, at once: the answer must not be the last one.
    let text = std::fs::read_to_string(&readme).expect("read");
    std::fs::write(&readme, text.replace("aaa", "bbb")).expect("write");
    let second = g.ok(&["diff", &id]);
    assert!(
        second.contains("+bbb") && !second.contains("+aaa"),
        "{second}"
    );
    std::fs::write(worktree.join("new.txt"), "new\n").expect("write");
    assert!(g.ok(&["diff", &id]).contains("+new"));
    std::fs::remove_file(worktree.join("new.txt")).expect("rm");
    assert!(!g.ok(&["diff", &id]).contains("+new"));
    let stat = g.ok(&["diff", "--stat", &id]);
    assert!(stat.contains("1 file changed"), "{stat}");

    let scratch = g.home.join("agents").join(&id).join("live-diff.index");
    assert!(scratch.exists(), "kept between diffs while it runs");
    std::fs::write(&gate, "").expect("gate");
    assert_eq!(g.wait(&id)["status"], "collected");
    assert!(!scratch.exists(), "gone once the work is on the branch");
    assert!(g.ok(&["diff", &id]).contains("+bbb"));
}

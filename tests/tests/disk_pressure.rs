//! Disk pressure on a real small filesystem: a tmpfs mounted as the worktree root.
//! Needs root to mount; elsewhere the test says why it skips.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::*;

const MIB: usize = 1 << 20;
const LONG: Duration = Duration::from_secs(60);

fn fill(path: &Path, mib: usize) {
    fs::write(path, vec![7u8; mib * MIB]).expect("write filler");
}

fn big_file_script(mib: usize) -> String {
    format!("head -c {} /dev/zero > big.bin", mib * MIB)
}

/// A 100 MiB tmpfs at `<scratch>/wt` as the worktree root; none where it cannot be
/// mounted, once [`can_run`] said why.
fn small_root(prefix: &str) -> Option<(tempfile::TempDir, Tmpfs, PathBuf)> {
    small_fs(prefix, "wt", 100)
}

/// A grove whose worktree root is `root`, its disk checked every 100 ms against an 80 %
/// high and a 50 % low mark, with the settings `more`.
fn pressured_grove(root: &Path, more: &[(&str, &str)]) -> Grove {
    Grove::new()
        .with_env(&[
            ("GROVE_WORKTREE_ROOT", root.to_str().expect("utf8")),
            ("GROVE_DISK_CHECK_INTERVAL", "100ms"),
            ("GROVE_DISK_HIGH", "80"),
            ("GROVE_DISK_LOW", "50"),
        ])
        .with_env(more)
}

#[test]
fn disk_pressure_removes_finished_worktrees_oldest_first_and_then_refuses_spawns() {
    let Some((_scratch, _mount, root)) = small_root("gd") else {
        return;
    };
    let g = pressured_grove(&root, &[]);
    fill(&root.join("filler"), 30);
    // Four finished agents keep 13 MiB each: 30 + 52 = 82 MiB of 100, over 80 %.
    let kept: Vec<(String, PathBuf)> = (0..4)
        .map(|_| {
            let id = g.spawn(&["--keep"], &big_file_script(13));
            let record = g.wait(&id);
            (id, PathBuf::from(record["worktree"].as_str().expect("wt")))
        })
        .collect();
    eventually("cleanup under 50 %", Duration::from_secs(60), || {
        !kept[2].1.exists()
    });
    assert!(!kept[0].1.exists() && !kept[1].1.exists());
    assert!(kept[3].1.exists(), "cleanup stops once usage is under 50 %");
    for (id, _) in &kept {
        let size = g.git(&["cat-file", "-s", &format!("grove/{id}:big.bin")]);
        assert_eq!(size.trim(), (13 * MIB).to_string(), "work of {id} salvaged");
    }
    let removed_by_pressure = || -> Vec<String> {
        g.json(&["gc", "--log"])["removals"]
            .as_array()
            .expect("removals")
            .iter()
            .filter(|r| {
                r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("disk pressure")
            })
            .filter_map(|r| r["agent_id"].as_str().map(String::from))
            .collect()
    };
    // Each removal is logged right after its worktree goes.
    eventually("three removals logged", Duration::from_secs(30), || {
        removed_by_pressure().len() >= 3
    });
    let oldest_first: Vec<String> = kept[..3].iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(removed_by_pressure(), oldest_first);

    // Only a live agent left and usage high: spawns are refused, the live one is spared.
    g.ok(&["rm", &kept[3].0]);
    fill(&root.join("filler2"), 40);
    let gates = g.make_dir("gates");
    let live = g.spawn(
        &[],
        &format!(
            "{}; touch '{gates}/written'; while [ ! -e '{gates}/go' ]; do sleep 0.05; done",
            big_file_script(15),
            gates = gates.display()
        ),
    );
    eventually("live agent wrote", Duration::from_secs(60), || {
        gates.join("written").exists()
    });
    g.run(&["spawn", "--", "true"]).assert_exit(
        4,
        &[
            "disk pressure",
            "full (threshold 80%)",
            "1 worktrees of live agents remain",
        ],
    );
    let live_worktree = PathBuf::from(g.record(&live)["worktree"].as_str().expect("wt"));
    assert!(
        live_worktree.join("big.bin").exists(),
        "the live agent is spared"
    );
    assert_eq!(g.all_agents().len(), 5);

    // Space comes back: spawns are accepted again.
    fs::remove_file(root.join("filler2")).expect("rm filler2");
    let id = g.spawn(&[], "true");
    fs::write(gates.join("go"), "").expect("go");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert_eq!(g.wait(&live)["outcome"], "succeeded");
}

#[test]
fn disk_pressure_empties_the_warm_pool_first_and_it_refills_only_after() {
    let Some((_scratch, _mount, root)) = small_root("gp") else {
        return;
    };
    let g = pressured_grove(&root, &[("GROVE_POOL_SIZE", "2")]);
    let first = g.spawn(&[], "true");
    g.wait(&first);
    eventually("a warm pool", Duration::from_secs(60), || {
        g.ready_pool_worktrees() == 2
    });
    assert_eq!(g.worktree_dirs().len(), 2);

    fill(&root.join("filler"), 85);
    eventually("the pool is gone", Duration::from_secs(60), || {
        g.json(&["daemon", "status"])["pool"]
            .as_array()
            .is_some_and(Vec::is_empty)
            && g.worktree_dirs().is_empty()
    });
    let refused = g.run(&["spawn", "--", "true"]);
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert!(g
        .git(&["for-each-ref", "refs/grove/salvage"])
        .trim()
        .is_empty());

    fs::remove_file(root.join("filler")).expect("rm filler");
    let mut id = String::new();
    eventually("spawns are accepted again", Duration::from_secs(60), || {
        let out = g.run(&["spawn", "--", "true"]);
        id = out.stdout.trim().to_string();
        out.code == 0
    });
    g.wait(&id);
    eventually("the pool is back", Duration::from_secs(60), || {
        g.ready_pool_worktrees() == 2
    });
}

/// Writes into `dir` until its filesystem has no byte left; the filler files' paths.
fn fill_to_the_last_byte(dir: &Path) -> Vec<PathBuf> {
    use std::io::Write;
    let mut fillers = Vec::new();
    for (n, chunk) in [MIB, 64 * 1024, 4096, 512, 1].into_iter().enumerate() {
        let path = dir.join(format!("filler-{n}"));
        let mut file = fs::File::create(&path).expect("create filler");
        let block = vec![7u8; chunk];
        while file
            .write_all(&block)
            .and_then(|()| file.sync_all())
            .is_ok()
        {}
        fillers.push(path);
    }
    fillers
}

/// Issue 29, item 2: a collect that fails on a full disk is tried again until it
/// succeeds; the agent meanwhile stays `exited` (never a final failure with its work
/// only in its worktree), and its branch gets the work once space comes back.
#[test]
fn a_collect_that_finds_the_disk_full_is_retried_until_space_comes_back() {
    let g = Grove::new();
    // The repository's objects, where a salvage writes, on a small filesystem of their own.
    let objects = g.repo.join(".git/objects");
    let kept = g.dir.path().join("objects-before");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&objects)
        .arg(&kept)
        .status();
    assert!(copied.is_ok_and(|s| s.success()), "cp objects");
    let Some(_mount) = Tmpfs::mount(&objects, 4)
        .map_err(|why| can_run("tmpfs", Some(why)))
        .ok()
    else {
        return;
    };
    let restored = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", kept.display()))
        .arg(&objects)
        .status();
    assert!(restored.is_ok_and(|s| s.success()), "cp objects back");
    let fillers = fill_to_the_last_byte(&objects);
    let id = g.spawn(
        &[],
        "head -c 65536 /dev/urandom > work.bin; echo done > work.txt",
    );
    eventually(
        "the collect fails for now and says it tries again",
        LONG,
        || {
            let record = g.record(&id);
            record["salvage_error"]
                .as_str()
                .is_some_and(|e| e.contains("tries again"))
        },
    );
    let record = g.record(&id);
    assert_eq!(record["status"], "exited", "{record}");
    // Shown as what it is, a collect still to come, never as a final failure.
    let shown = g.ok(&["list", "--all"]);
    assert!(
        shown.contains("collecting") && !shown.contains("salvage failed"),
        "{shown}"
    );
    let worktree = PathBuf::from(record["worktree"].as_str().expect("worktree"));
    assert!(
        worktree.join("work.txt").exists(),
        "the work left its worktree"
    );
    for filler in fillers {
        fs::remove_file(filler).expect("free the space");
    }
    let done = g.wait(&id);
    assert_eq!(done["status"], "collected", "{done}");
    assert!(done["salvage_error"].is_null(), "{done}");
    assert_eq!(g.agent_file(&id, "work.txt"), "done\n");
    g.assert_no_worktree_left();
}

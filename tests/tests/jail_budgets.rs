//! What a jailed agent puts into the user's repository is budgeted: an object over
//! `salvage_max_file` on its branch (a small object that inflates to megabytes, here)
//! keeps the whole branch out, said in the record, and its own repository is kept so
//! that nothing is lost. Its checkpoints' code waits in a code store of grove's until
//! its collect, then comes in by a fetch that verifies every object.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;
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

/// A file over `salvage_max_file` is left out of a checkpoint's code, and the
/// checkpoint says so.
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

/// Bytes of every file under the repository's `.git/objects`.
fn objects_bytes(repo: &Path) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    }
    walk(&repo.join(".git/objects"))
}

/// Bytes that do not compress: `n` of a simple generator, different for each `seed`.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

const CHECKPOINTS: u64 = 10;
const FILE_BYTES: usize = 1_500_000;

/// An agent of session `work` that writes `CHECKPOINTS` checkpoints, each with one more
/// distinct file of `FILE_BYTES` (copied from the test's files), then waits for `gate`.
fn checkpointing_agent(g: &Grove, flags: &[&str], gate: &Path) -> String {
    for n in 1..=CHECKPOINTS {
        g.write_file(&format!("noise-{n}"), noise(n, FILE_BYTES));
    }
    let script = format!(
        r#"set -e
        for n in $(seq 1 {CHECKPOINTS}); do
            cp '{files}'/noise-$n f$n.bin
            "$GROVE_BIN" state update count 1
        done
        while [ ! -e '{gate}' ]; do sleep 0.02; done"#,
        files = g.files().display(),
        gate = gate.display()
    );
    spawn_in_session_with(g, "work", flags, &script)
}

/// Waits until `session`'s `count` is `n`.
fn count_reaches(g: &Grove, session: &str, n: u64) {
    eventually("the checkpoints", Duration::from_secs(60), || {
        g.run(&["state", "get", "--session", session, "count"])
            .stdout
            .trim()
            == n.to_string()
    });
}

/// The growth of the user's objects while an agent writes its checkpoints.
fn growth_while_checkpointing(g: &Grove, flags: &[&str], gate: &Path) -> (String, u64, u64) {
    let before = objects_bytes(&g.repo);
    let id = checkpointing_agent(g, flags, gate);
    count_reaches(g, "work", CHECKPOINTS);
    let grown = objects_bytes(&g.repo).saturating_sub(before);
    eprintln!("{flags:?}: {CHECKPOINTS} checkpoints grew the user's objects by {grown} bytes");
    (id, before, grown)
}

/// `grove state fork --spawn` of checkpoint `at` of `work`, with an agent that prints
/// the blob id of each `f<n>.bin` it finds; its log.
fn fork_listing_files(g: &Grove, at: u64, session: &str) -> String {
    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        "work",
        "--at",
        &at.to_string(),
        "--session",
        session,
        "--spawn",
        "--",
        "sh",
        "-c",
        r#"for f in f*.bin; do [ -e "$f" ] && echo "$f $(git hash-object "$f")"; done; true"#,
    ]);
    let record: serde_json::Value = serde_json::from_str(&out).expect("the new agent's record");
    g.succeeded_log(record["id"].as_str().expect("id"))
}

fn sorted(log: &str) -> Vec<String> {
    let mut lines: Vec<String> = log.lines().map(String::from).collect();
    lines.sort();
    lines
}

/// What checkpoint `at` had: `f1.bin`..`f<at>.bin`, each with its blob id.
fn files_of_checkpoint(g: &Grove, at: u64) -> Vec<String> {
    let mut files: Vec<String> = (1..=at)
        .map(|n| {
            let path = g.files().join(format!("noise-{n}"));
            let blob = g.git(&["hash-object", path.to_str().expect("utf-8")]);
            format!("f{n}.bin {}", blob.trim())
        })
        .collect();
    files.sort();
    files
}

/// Ten checkpoints of a jailed agent, each with a new file of 1.5 MB (under
/// `salvage_max_file`), put nothing into the user's `.git/objects` while it runs; an
/// agent's request for that code is refused meanwhile, the user's own `fork --spawn`
/// brings one in; after the collect every checkpoint's code is the user's, held so that
/// `git gc --prune=now` with the agent's branch gone leaves `fork --spawn` each file
/// exactly. The control: the same agent unjailed puts the 15 MB in at once.
#[test]
fn a_jailed_agents_checkpoints_stay_out_of_the_users_objects_until_its_collect() {
    if !have_landlock() {
        return;
    }
    let all = CHECKPOINTS * FILE_BYTES as u64;
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let gate = g.files().join("gate");
    let (id, before, grown) = growth_while_checkpointing(&g, &["--jail"], &gate);
    let near_nothing = 256 << 10;
    assert!(
        grown < near_nothing,
        "{CHECKPOINTS} jailed checkpoints of {all} new bytes grew the user's objects by {grown} bytes"
    );
    // An agent cannot bring it in; the user can.
    let (code, err) = agent_of_session_runs(&g, "work", "state code --session work 4");
    assert_ne!(code, "0", "{err}");
    assert_holds_all(
        &err,
        &[
            "checkpoint 4 of `work`",
            &format!("code store of jailed agent {id}"),
            "an agent's request never brings it",
        ],
    );
    let grown = objects_bytes(&g.repo).saturating_sub(before);
    assert!(
        grown < near_nothing,
        "the refused request brought {grown} bytes in"
    );
    let log = fork_listing_files(&g, 3, "early");
    assert_eq!(sorted(&log), files_of_checkpoint(&g, 3), "{log}");

    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    assert!(record["salvage_error"].is_null(), "{record}");
    assert!(
        !g.home.join("agents").join(&id).join("code.git").exists(),
        "the store outlived the collect"
    );
    g.git(&["branch", "-D", &format!("grove/{id}")]);
    g.git(&["reflog", "expire", "--expire=now", "--all"]);
    g.git(&["gc", "--prune=now", "--quiet"]);
    for at in [5, CHECKPOINTS] {
        let log = fork_listing_files(&g, at, &format!("after-{at}"));
        assert_eq!(sorted(&log), files_of_checkpoint(&g, at), "{log}");
    }

    // The control: unjailed, the same checkpoints are in the user's objects at once.
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let gate = g.files().join("gate");
    let (id, _, grown) = growth_while_checkpointing(&g, &["--no-jail"], &gate);
    assert!(
        grown > all * 9 / 10,
        "unjailed, {CHECKPOINTS} checkpoints of {all} new bytes grew the user's objects by only {grown}"
    );
    fs::write(&gate, "").expect("gate");
    g.wait(&id);
}

/// A jailed agent that rewrites an object of its own repository (the blob of a file it
/// committed, now holding other bytes under the same name) and tries to reach its code
/// store: the store is nowhere in its view, the user's repository never gets the wrong
/// bytes under that name (`git fsck` finds every object's content matches its name),
/// the branch's fetch refuses the rewritten objects (the worktree is kept), and `fork
/// --spawn` of its checkpoint gets the file as it was. The agent's own repository reads
/// the rewritten objects as the wrong bytes: the tampering took.
#[test]
fn a_tampered_object_of_a_jailed_agent_never_enters_the_users_repository_as_its_content() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let script = format!(
        r#"set -e
        echo 'the good content' > good.txt
        git add good.txt
        git -c user.name=a -c user.email=a@b commit -qm good
        "$GROVE_BIN" state update count 1
        echo 'committed later' > later.txt
        git add later.txt
        git -c user.name=a -c user.email=a@b commit -qm later
        evil=$(echo 'the evil content' | git hash-object -w --stdin)
        evil=.git/objects/$(echo $evil | cut -c1-2)/$(echo $evil | cut -c3-)
        for file in good.txt later.txt; do
            blob=$(git rev-parse HEAD:$file)
            at=.git/objects/$(echo $blob | cut -c1-2)/$(echo $blob | cut -c3-)
            chmod u+w "$at"
            cp "$evil" "$at"
            echo "$file reads as: $(git cat-file blob $blob)"
        done
        for store in '{state}'/agents/*/code.git; do
            [ -e "$store" ] && echo "store seen: $store"
            echo planted > "$store/objects/planted" 2>/dev/null && echo "store written"
        done
        true"#,
        state = g.home.display()
    );
    let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
    let record = g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert_eq!(record["outcome"], "succeeded", "{record}\n{log}");
    for file in ["good.txt", "later.txt"] {
        assert!(
            log.contains(&format!("{file} reads as: the evil content")),
            "the tampering did not take: {log}"
        );
    }
    // The branch's fetch hashed what it got and refused it: nothing came of it.
    assert_holds_all(
        record["salvage_error"].as_str().unwrap_or_default(),
        &["did not send all necessary objects", "worktree kept"],
    );
    assert!(
        !log.contains("store seen") && !log.contains("store written"),
        "{log}"
    );
    assert!(
        !g.home
            .join("agents")
            .join(&id)
            .join("code.git/objects/planted")
            .exists(),
        "the agent wrote into its code store"
    );
    for text in ["the good content\n", "committed later\n"] {
        let blob = hash_of(&g, text);
        if has_object(&g.repo, &blob) {
            assert_eq!(g.git(&["cat-file", "blob", &blob]), text);
        }
    }
    g.git(&["fsck", "--full", "--no-dangling", "--no-progress"]);
    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        "work",
        "--at",
        "1",
        "--session",
        "again",
        "--spawn",
        "--",
        "cat",
        "good.txt",
    ]);
    let forked: serde_json::Value = serde_json::from_str(&out).expect("record");
    let log = g.succeeded_log(forked["id"].as_str().expect("id"));
    assert_eq!(log, "the good content\n");
}

/// The blob id of `text`.
fn hash_of(g: &Grove, text: &str) -> String {
    let path = g.write_file("hash-me", text);
    g.git(&["hash-object", path.to_str().expect("utf-8")])
        .trim()
        .to_string()
}

/// A jailed agent's checkpoint refs wait in its code store, where a compaction meanwhile
/// does not reach them: those its collect brings in for checkpoints deleted since go
/// at once, and the kept checkpoint's stays. A fork made meanwhile of a checkpoint
/// compacted since has its own ref: `git gc --prune=now` leaves `fork --spawn` of it
/// the file as it was.
#[test]
fn refs_of_checkpoints_compacted_while_a_jailed_agent_ran_go_after_its_collect() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let gate = g.files().join("gate");
    let script = format!(
        r#"set -e
        for n in 1 2 3; do echo $n > work.txt; "$GROVE_BIN" state update count 1; done
        while [ ! -e '{gate}' ]; do sleep 0.02; done"#,
        gate = gate.display()
    );
    let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
    count_reaches(&g, "work", 3);
    g.ok(&[
        "state",
        "fork",
        "--from",
        "work",
        "--at",
        "2",
        "--session",
        "side",
    ]);
    g.ok(&["state", "compact", "--session", "work", "--keep", "1"]);
    fs::write(&gate, "").expect("gate");
    g.wait(&id);
    let refs = || {
        g.git(&[
            "for-each-ref",
            "--format=%(refname)",
            "refs/grove/checkpoints/",
        ])
    };
    eventually(
        "only the kept checkpoint's ref",
        Duration::from_secs(10),
        || refs().trim() == "refs/grove/checkpoints/side/1\nrefs/grove/checkpoints/work/3",
    );
    let code = g.json(&["state", "code", "--session", "work", "3"]);
    let tree = code["tree"].as_str().expect("tree");
    assert_eq!(
        g.git(&["cat-file", "blob", &format!("{tree}:work.txt")]),
        "3\n"
    );
    g.git(&["branch", "-D", &format!("grove/{id}")]);
    g.git(&["reflog", "expire", "--expire=now", "--all"]);
    g.git(&["gc", "--prune=now", "--quiet"]);
    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        "side",
        "--at",
        "1",
        "--session",
        "again",
        "--spawn",
        "--",
        "cat",
        "work.txt",
    ]);
    let forked: serde_json::Value = serde_json::from_str(&out).expect("record");
    assert_eq!(g.succeeded_log(forked["id"].as_str().expect("id")), "2\n");
}

/// Checkpoint code over `salvage_max_file` when the collect comes (the cap lowered
/// while the agent ran) stays out of the user's repository, and both the record and
/// `state code` say why; the agent's other checkpoint comes in and forks.
#[test]
fn checkpoint_code_over_the_cap_at_collect_stays_out_and_says_so() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    g.write_config("salvage_max_file = \"4M\"\n");
    commit_schema(&g, COUNTER_SCHEMA);
    let big = g.write_file("big", noise(7, 2_000_000));
    let gate = g.files().join("gate");
    let script = format!(
        r#"set -e
        cp '{big}' big.bin; "$GROVE_BIN" state update count 1
        rm big.bin; echo small > small.txt; "$GROVE_BIN" state update count 1
        while [ ! -e '{gate}' ]; do sleep 0.02; done"#,
        big = big.display(),
        gate = gate.display()
    );
    let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
    count_reaches(&g, "work", 2);
    g.ok(&["daemon", "stop"]);
    g.write_config("salvage_max_file = \"1M\"\n");
    fs::write(&gate, "").expect("gate");
    let record = g.wait(&id);
    let error = record["salvage_error"].as_str().unwrap_or_default();
    assert_holds_all(
        error,
        &[
            "checkpoint code kept out of your repository",
            "refs/grove/checkpoints/work/1 holds an object over salvage_max_file (1048576 \
             bytes): big.bin, 2000000 bytes",
        ],
    );
    assert!(!error.contains("work/2"), "{error}");
    let blob = g.git(&["hash-object", big.to_str().expect("utf-8")]);
    assert!(!has_object(&g.repo, blob.trim()), "the big blob came in");
    g.fails(
        &["state", "code", "--session", "work", "1"],
        &[
            "checkpoint 1 of `work`",
            "not brought into the repository when its agent was collected",
            "over salvage_max_file (1048576 bytes): big.bin, 2000000 bytes",
        ],
    );
    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        "work",
        "--at",
        "2",
        "--session",
        "small",
        "--spawn",
        "--",
        "cat",
        "small.txt",
    ]);
    let forked: serde_json::Value = serde_json::from_str(&out).expect("record");
    assert_eq!(
        g.succeeded_log(forked["id"].as_str().expect("id")),
        "small\n"
    );
}

/// A jailed agent's child starts from the agent's HEAD, which grove brings into the
/// user's repository for it: under the rule of the agent's branch. A HEAD holding an
/// object over `salvage_max_file` (a 2 MB file, the cap 1M) is refused, with why, and
/// none of it comes in. The control: under the cap, the child starts.
#[test]
fn a_jailed_agents_child_never_brings_an_object_over_the_cap_into_the_users_repository() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new().with_env(&[("GROVE_SALVAGE_MAX_FILE", "1M")]);
    for (name, bytes) in [("big", 2_000_000), ("fits", 500_000)] {
        g.write_file(name, noise(bytes as u64, bytes));
    }
    let spawn_on = |name: &str| {
        let script = format!(
            r#"cp '{files}/{name}' {name}.bin && git add {name}.bin && git commit -qm {name} || exit 1
            "$GROVE_BIN" spawn -- true 2> err.txt && echo spawned; cat err.txt; true"#,
            files = g.files().display()
        );
        let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
        g.succeeded_log(&id)
    };
    let log = spawn_on("big");
    assert_holds_all(
        &log,
        &[
            "holds an object over salvage_max_file (1048576 bytes): big.bin, 2000000 bytes",
            "nothing of it was brought into the repository",
        ],
    );
    assert!(!log.contains("spawned"), "{log}");
    let big = g.git(&["hash-object", &g.files().join("big").display().to_string()]);
    assert!(!has_object(&g.repo, big.trim()), "the big blob came in");

    let log = spawn_on("fits");
    assert!(log.contains("spawned"), "{log}");
}

/// A daemon killed while a jailed agent runs leaves its code store as it was: the next
/// daemon adopts the agent, records more into the same store, and its collect brings
/// every checkpoint's code in.
#[test]
fn a_jailed_agents_code_store_outlives_a_daemon_crash() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let gate = g.files().join("gate");
    let script = format!(
        r#"set -e
        echo one > work.txt; "$GROVE_BIN" state update count 1
        while [ ! -e '{gate}' ]; do sleep 0.02; done
        echo two > work.txt
        until "$GROVE_BIN" state update count 1; do sleep 0.1; done"#,
        gate = gate.display()
    );
    let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
    count_reaches(&g, "work", 1);
    g.crash_daemon();
    fs::write(&gate, "").expect("gate");
    count_reaches(&g, "work", 2);
    let record = g.wait(&id);
    assert!(record["salvage_error"].is_null(), "{record}");
    assert!(!g.home.join("agents").join(&id).join("code.git").exists());
    let refs = g.git(&[
        "for-each-ref",
        "--format=%(refname)",
        "refs/grove/checkpoints/",
    ]);
    assert_eq!(
        refs,
        "refs/grove/checkpoints/work/1\nrefs/grove/checkpoints/work/2\n"
    );
    for (at, text) in [(1, "one\n"), (2, "two\n")] {
        let code = g.json(&["state", "code", "--session", "work", &at.to_string()]);
        let tree = code["tree"].as_str().expect("tree");
        assert_eq!(
            g.git(&["cat-file", "blob", &format!("{tree}:work.txt")]),
            text
        );
    }
}

/// A hold a crash left in a jailed agent's code store (its checkpoint stored, the
/// checkpoint's ref never made) is settled once its collect brings it in: the
/// checkpoint gets its ref, and no recording ref stays.
#[test]
fn a_hold_a_crash_left_in_a_code_store_is_settled_after_its_collect() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let gate = g.files().join("gate");
    let script = format!(
        r#"echo one > work.txt; "$GROVE_BIN" state update count 1
        while [ ! -e '{gate}' ]; do sleep 0.02; done"#,
        gate = gate.display()
    );
    let id = spawn_in_session_with(&g, "work", &["--jail"], &script);
    count_reaches(&g, "work", 1);
    // What a crash between storing the checkpoint and naming its code leaves.
    let store = g.home.join("agents").join(&id).join("code.git");
    let named = "refs/grove/checkpoints/work/1";
    let commit = git_in(&store, &["rev-parse", named]);
    let hold = format!("refs/grove/recording/{id}/{}", commit.trim());
    git_in(&store, &["update-ref", &hold, commit.trim()]);
    git_in(&store, &["update-ref", "-d", named]);
    fs::write(&gate, "").expect("gate");
    g.wait(&id);
    let refs = || {
        g.git(&["for-each-ref", "--format=%(refname)", "refs/grove/"])
            .trim()
            .to_string()
    };
    eventually("the hold settled", Duration::from_secs(10), || {
        refs() == named
    });
    assert_eq!(g.git(&["rev-parse", named]).trim(), commit.trim());
}

//! Checkpoints tied to code (issue 17): a checkpoint an agent writes records its branch
//! tip and a tree of its worktree, uncommitted work included, without touching its
//! index or branch; the user's writes record nothing; a jailed agent cannot make the
//! recording run its own git config outside the jail.

mod support;

use serde_json::Value;
use std::fs;
use std::path::Path;
use support::*;

const SCHEMA: &str = COUNTER_SCHEMA;

/// A grove whose repository commits `SCHEMA`.
fn grove_with_schema() -> Grove {
    let g = Grove::new();
    commit_schema(&g, SCHEMA);
    g
}

/// Runs `script` as an agent of the session `orig`, which must succeed.
fn run_in_orig(g: &Grove, script: &str) {
    let id = spawn_in_session(g, "orig", script);
    g.succeeded_log(&id);
}

/// The trees an agent printed as `tree <id>` lines of its log, in order.
fn trees_printed(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|l| l.strip_prefix("tree "))
        .collect()
}

/// The trees `session`'s checkpoints recorded, oldest first (the history lists the
/// newest first).
fn trees_recorded(g: &Grove, session: &str) -> Vec<String> {
    checkpoints(g, session)
        .iter()
        .rev()
        .map(|c| c["code"]["tree"].as_str().unwrap_or("none").to_string())
        .collect()
}

/// Has the daemon make the code refs of `session`'s checkpoints `at` (`state.code`).
fn make_code_refs(c: &mut grove_proto::Client, session: &str, at: &[u64]) {
    for at in at {
        call(
            c,
            "state.code",
            serde_json::json!({"session": session, "at": at}),
        )
        .expect("state.code");
    }
}

fn checkpoints(g: &Grove, session: &str) -> Vec<Value> {
    g.json(&["state", "history", "--session", session])["checkpoints"]
        .as_array()
        .expect("checkpoints")
        .clone()
}

/// Paths and contents of `tree` in the user's repository.
fn tree_file(repo: &Path, tree: &str, path: &str) -> String {
    git_in(repo, &["cat-file", "blob", &format!("{tree}:{path}")])
}

/// An agent that commits one file, leaves another staged and another untracked,
/// writes a checkpoint, prints its HEAD and its `git status` before and after (to its
/// log: a jailed agent writes nowhere else), and waits for `gate`.
fn working_agent(gate: &Path) -> String {
    format!(
        r#"set -e
        echo committed > committed.txt
        git add committed.txt
        git -c user.name=a -c user.email=a@b commit -qm work
        echo staged > staged.txt
        git add staged.txt
        echo untracked > untracked.txt
        echo "head $(git rev-parse HEAD)"
        git status --porcelain | sed 's/^/before /'
        "$GROVE_BIN" state update count 1
        git status --porcelain | sed 's/^/after /'
        while [ ! -e '{gate}' ]; do sleep 0.02; done"#,
        gate = gate.display()
    )
}

fn records_the_code(jail: bool) {
    let g = grove_with_schema();
    let gate = g.files().join("gate");
    let jail_flag: &[&str] = if jail { &["--jail"] } else { &[] };
    let id = spawn_in_session_with(&g, "work", jail_flag, &working_agent(&gate));
    eventually(
        "the agent wrote",
        std::time::Duration::from_secs(30),
        || {
            g.run(&["state", "get", "--session", "work", "count"])
                .stdout
                .trim()
                == "1"
        },
    );
    g.state_update("work", &["count", "1"]);
    let history = checkpoints(&g, "work");
    let (user, agent) = (&history[0], &history[1]);
    assert_eq!(user["writer"], "user", "{history:?}");
    assert!(
        user.get("code").is_none(),
        "the user's write records nothing: {user}"
    );
    assert_eq!(agent["writer"], id.as_str(), "{history:?}");
    let code = &agent["code"];
    let tree = code["tree"]
        .as_str()
        .unwrap_or_else(|| panic!("no tree: {agent}"));
    let commit = code["commit"].as_str().expect("commit");

    // Its work is all in the tree, committed or not: in the user's repository at once,
    // or a jailed agent's at its collect.
    let has_work = |g: &Grove| {
        for file in ["committed", "staged", "untracked"] {
            assert_eq!(
                tree_file(&g.repo, tree, &format!("{file}.txt")).trim(),
                file
            );
        }
    };
    if jail {
        assert!(
            !has_object(&g.repo, tree),
            "a jailed agent's checkpoint code is in the user's repository while it runs"
        );
    } else {
        has_work(&g);
    }
    fs::write(&gate, "").expect("gate");
    let log = g.succeeded_log(&id);
    has_work(&g);
    assert!(log.contains(&format!("head {commit}")), "{commit}: {log}");
    // The agent's index and branch are as it left them.
    let lines = |prefix: &str| -> Vec<String> {
        log.lines()
            .filter_map(|l| l.strip_prefix(prefix).map(String::from))
            .collect()
    };
    assert_eq!(lines("before "), lines("after "), "{log}");
    assert!(
        lines("before ").contains(&"A  staged.txt".to_string())
            && lines("before ").contains(&"?? untracked.txt".to_string()),
        "{log}"
    );

    let shown = g.ok(&["state", "history", "--session", "work"]);
    assert!(
        shown.contains("CODE") && shown.contains(&tree[..10]),
        "{shown}"
    );
}

#[test]
fn an_agents_checkpoint_records_its_branch_and_uncommitted_work() {
    records_the_code(false);
}

#[test]
fn a_jailed_agents_checkpoint_code_reaches_the_users_repository_at_its_collect() {
    records_the_code(true);
}

#[test]
fn a_jailed_agent_cannot_make_the_recording_run_its_git_config() {
    let g = grove_with_schema();
    let marker = g.dir.path().join("pwned");
    // The agent names a clean filter for every file in its own repository's config and
    // in .gitattributes: git run with that config outside the jail would run it.
    let script = format!(
        r#"set -e
        git config filter.evil.clean "sh -c 'echo ran >> {m}; cat'"
        git config core.fsmonitor "sh -c 'echo ran >> {m}'"
        echo '* filter=evil' > .gitattributes
        echo data > file.txt
        "$GROVE_BIN" state update count 1"#,
        m = marker.display()
    );
    let id = spawn_in_session_with(&g, "evil", &["--jail"], &script);
    g.succeeded_log(&id);
    let history = checkpoints(&g, "evil");
    let tree = history[0]["code"]["tree"]
        .as_str()
        .unwrap_or_else(|| panic!("no tree: {history:?}"));
    assert_eq!(tree_file(&g.repo, tree, "file.txt").trim(), "data");
    assert!(
        !marker.exists(),
        "the agent's filter ran outside its jail: {:?}",
        fs::read_to_string(&marker)
    );
}

#[test]
fn fork_with_spawn_starts_an_agent_on_the_code_of_the_checkpoint() {
    let g = grove_with_schema();
    // The agent leaves a file uncommitted, writes a checkpoint, then changes the file
    // and writes again: the second checkpoint's code is not the first's.
    run_in_orig(
        &g,
        r#"set -e
        echo one > work.txt
        "$GROVE_BIN" state update count 1
        echo two > work.txt
        "$GROVE_BIN" state update count 1"#,
    );

    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        "orig",
        "--at",
        "1",
        "--session",
        "retry",
        "--spawn",
        "--",
        "sh",
        "-c",
        "cat work.txt",
    ]);
    let record: Value = serde_json::from_str(&out).expect("the new agent's record");
    let id = record["id"].as_str().expect("id").to_string();
    assert_eq!(record["session"], "retry");
    assert_eq!(record["base_ref"], "refs/grove/checkpoints/orig/1");
    let log = g.succeeded_log(&id);
    assert_eq!(log, "one\n", "the agent sees the code of checkpoint 1");
    assert_eq!(
        g.ok(&["state", "get", "--session", "retry", "count"])
            .trim(),
        "1"
    );
    let tree = checkpoints(&g, "orig")
        .iter()
        .find(|c| c["id"] == 1)
        .map(|c| c["code"]["tree"].clone())
        .expect("checkpoint 1");
    assert_eq!(
        git_in(
            &g.repo,
            &["rev-parse", "refs/grove/checkpoints/orig/1^{tree}"]
        )
        .trim(),
        tree.as_str().expect("tree")
    );
}

#[test]
fn fork_with_spawn_at_a_users_checkpoint_is_refused_and_makes_nothing() {
    let g = grove_with_schema();
    create_session_from(&mut client(&g), "plain", "t.toml", SCHEMA);
    g.state_update("plain", &["count", "1"]);
    g.refused(
        &[
            "state",
            "fork",
            "--from",
            "plain",
            "--at",
            "1",
            "--session",
            "nope",
            "--spawn",
            "--",
            "true",
        ],
        "records no code",
    );
    let names = g.ok(&["session", "list"]);
    assert!(!names.contains("nope"), "{names}");
}

/// The recording reads the worktree in the daemon: a link there is recorded as the
/// link it is (mode 120000, its target as the blob), never followed to what it names
/// outside the jail; a FIFO is skipped, never opened (which would hang the recording).
#[test]
fn a_jailed_agents_links_are_recorded_as_links_and_its_fifos_never_opened() {
    let g = grove_with_schema();
    let outside = g.make_dir("outside");
    let secret = "secret of the user, never to be recorded\n";
    fs::write(outside.join("key"), secret).expect("key");
    let script = format!(
        r#"set -e
        ln -s '{o}/key' link-to-file
        ln -s '{o}' link-to-dir
        mkfifo pipe
        echo data > file.txt
        "$GROVE_BIN" state update count 1
        echo "update done""#,
        o = outside.display()
    );
    let id = spawn_in_session_with(&g, "links", &["--jail"], &script);
    let log = g.succeeded_log(&id);
    assert!(log.contains("update done"), "{log}");
    let history = checkpoints(&g, "links");
    let tree = history[0]["code"]["tree"]
        .as_str()
        .unwrap_or_else(|| panic!("no tree: {history:?}"));
    let listing = git_in(&g.repo, &["ls-tree", "-r", tree]);
    for (link, target) in [
        ("link-to-file", outside.join("key")),
        ("link-to-dir", outside.clone()),
    ] {
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with("120000 blob") && l.ends_with(&format!("\t{link}"))),
            "{link} is not recorded as a link: {listing}"
        );
        assert_eq!(tree_file(&g.repo, tree, link), target.display().to_string());
    }
    assert!(
        !listing.contains("link-to-dir/") && !listing.contains("\tpipe"),
        "{listing}"
    );
    // Nothing read through a link reached the user's repository.
    let key = outside.join("key");
    let blob = git_in(&g.repo, &["hash-object", &key.display().to_string()]);
    let present = std::process::Command::new("git")
        .arg("-C")
        .arg(&g.repo)
        .args(["cat-file", "-e", blob.trim()])
        .status()
        .expect("git cat-file");
    assert!(!present.success(), "the secret's blob is in the repository");
}

/// `refs/grove/checkpoints/<session>/<n>` in the user's repository, sorted.
fn checkpoint_refs(g: &Grove) -> Vec<String> {
    let out = git_in(
        &g.repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/grove/checkpoints/",
        ],
    );
    out.lines().map(String::from).collect()
}

/// The refs under `prefix` of the user's repository, sorted.
fn grove_refs(g: &Grove, prefix: &str) -> Vec<String> {
    let out = git_in(&g.repo, &["for-each-ref", "--format=%(refname)", prefix]);
    out.lines().map(String::from).collect()
}

fn wait_for_refs(g: &Grove, want: &[&str]) {
    eventually(
        &format!("checkpoint refs {want:?}"),
        std::time::Duration::from_secs(10),
        || checkpoint_refs(g) == want,
    );
}

/// The ref `state.code` makes for a checkpoint goes when the checkpoint goes:
/// compacted, unpinned after compaction, or with its session. An agent started on one
/// keeps its code: its branch holds the commit from its start on.
#[test]
fn checkpoint_refs_go_with_their_checkpoints_and_their_session() {
    let g = grove_with_schema();
    run_in_orig(
        &g,
        r#"set -e
        for n in 1 2 3 4; do echo "$n" > work.txt; "$GROVE_BIN" state update count 1; done"#,
    );
    // Every checkpoint has its ref once its update is answered; asking for it changes
    // nothing, and no hold is left.
    let all = [1, 2, 3, 4].map(|n| format!("refs/grove/checkpoints/orig/{n}"));
    assert_eq!(checkpoint_refs(&g), all);
    let mut c = client(&g);
    make_code_refs(&mut c, "orig", &[1, 2, 4]);
    assert_eq!(checkpoint_refs(&g), all);
    assert_eq!(
        grove_refs(&g, "refs/grove/recording/"),
        Vec::<String>::new()
    );

    // An agent on the code of checkpoint 4, running while its ref goes.
    let gate = g.files().join("gate");
    let on_code = g.spawn(
        &["--base", &all[3]],
        &format!(
            "cat work.txt; while [ ! -e '{}' ]; do sleep 0.02; done",
            gate.display()
        ),
    );
    eventually(
        "the agent on checkpoint 4 runs",
        std::time::Duration::from_secs(30),
        || g.ok(&["logs", &on_code]) == "4\n",
    );
    let base = g.record(&on_code)["base_commit"]
        .as_str()
        .expect("base_commit")
        .to_string();

    // Pinned 2 outlives the compaction that takes 1; unpinned, it goes too.
    g.ok(&["state", "pin", "--session", "orig", "2"]);
    g.ok(&["state", "compact", "--session", "orig", "--keep", "2"]);
    wait_for_refs(&g, &[&all[1], &all[2], &all[3]]);
    g.ok(&["state", "pin", "--session", "orig", "2", "--remove"]);
    wait_for_refs(&g, &[&all[2], &all[3]]);
    g.ok(&["session", "rm", "orig"]);
    wait_for_refs(&g, &[]);

    // Its branch names the commit: no `git gc` can take it.
    let branch = g.record(&on_code)["branch"]
        .as_str()
        .expect("branch")
        .to_string();
    git_in(&g.repo, &["merge-base", "--is-ancestor", &base, &branch]);
    fs::write(&gate, "").expect("gate");
    let done = g.wait(&on_code);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    assert_eq!(g.ok(&["logs", &on_code]), "4\n");
}

/// A grove with one slot whose session `orig` has two checkpoints of an agent, each
/// with its code ref made (`state.code`); the client that made them.
fn two_checkpoints_with_refs() -> (Grove, grove_proto::Client) {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "1")]);
    commit_schema(&g, SCHEMA);
    run_in_orig(
        &g,
        r#"set -e
        for n in 1 2; do echo "$n" > work.txt; "$GROVE_BIN" state update count 1; done"#,
    );
    let mut c = client(&g);
    make_code_refs(&mut c, "orig", &[1, 2]);
    (g, c)
}

/// A queued agent spawned on a checkpoint's code has no branch yet: the ref is what
/// keeps the commit until it starts, so it stays when its session goes.
#[test]
fn a_checkpoint_ref_a_queued_agent_waits_on_stays_when_its_session_goes() {
    let (g, _client) = two_checkpoints_with_refs();
    let (holder, hold) = g.spawn_gated(&[], "", "");
    let queued = g.spawn(&["--base", "refs/grove/checkpoints/orig/2"], "cat work.txt");
    assert_eq!(g.status(&queued), "queued");

    g.ok(&["session", "rm", "orig"]);
    wait_for_refs(&g, &["refs/grove/checkpoints/orig/2"]);
    fs::write(&hold, "").expect("hold");
    assert_eq!(g.wait(&holder)["outcome"], "succeeded");
    let done = g.wait(&queued);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    assert_eq!(g.ok(&["logs", &queued]), "2\n");
}

/// Each checkpoint writes only the trees along what changed since the last: the trees
/// recorded are the very ones `git add -A && git write-tree` makes, through a file
/// that becomes a directory and back, a mode change, a link, a deleted directory and
/// a file touched without a change.
#[test]
fn trees_written_from_the_last_one_are_the_ones_git_writes() {
    let g = grove_with_schema();
    let script = r#"set -e
        idx=$(mktemp -u)
        step() { "$GROVE_BIN" state update count 1; GIT_INDEX_FILE=$idx git add -A; echo "tree $(GIT_INDEX_FILE=$idx git write-tree)"; }
        echo a > a.txt; step
        rm a.txt; mkdir a.txt; echo in > a.txt/inner; step
        chmod +x README.md; step
        rm -r a.txt; echo back > a.txt; step
        ln -s README.md link; echo skip > x.ignored; step
        rm -r src; step
        touch README.md; step
        rm "$idx""#;
    let id = spawn_in_session(&g, "trees", script);
    let log = g.succeeded_log(&id);
    assert_eq!(trees_recorded(&g, "trees"), trees_printed(&log), "{log}");
}

/// The recording stats every tracked file (several threads, each directory opened
/// without following links) and hands libgit2 only what its stat data does not vouch
/// for. Each change here is one such a walk could miss: the trees recorded must still
/// be those `git add -A && git write-tree` makes. A file rewritten at the same size
/// with its mtime set back (only its ctime tells), two files of one size swapped (only
/// their inodes tell), a tracked directory turned into a link to a directory outside
/// (recorded as the link, never followed), a directory unignored by an edit of
/// `.gitignore`, new nested and empty directories.
#[test]
fn changes_only_stat_data_or_a_link_can_tell_are_recorded() {
    let g = grove_with_schema();
    let outside = g.dir.path().join("outside");
    fs::create_dir_all(outside.join("deep")).expect("outside");
    fs::write(outside.join("deep/one"), "secret\n").expect("secret");
    let script = format!(
        r#"set -e
        idx=$(mktemp -u)
        step() {{ "$GROVE_BIN" state update count 1; GIT_INDEX_FILE=$idx git add -A; echo "tree $(GIT_INDEX_FILE=$idx git write-tree)"; }}
        mkdir -p keep/deep build; echo aaaa > keep/deep/one; echo bbbb > keep/deep/two
        printf 'build/\n' > .gitignore; echo out > build/out; step
        ref=$(mktemp); touch -r src/lib.txt "$ref"; printf 'ONE\nTWO\nTHREE\n' > src/lib.txt; touch -r "$ref" src/lib.txt; step
        mv keep/deep/one t; mv keep/deep/two keep/deep/one; mv t keep/deep/two; step
        rm -r keep; ln -s '{o}' keep; step
        printf '# none\n' > .gitignore; step
        mkdir -p new/a/b empty; echo n > new/a/b/c; step
        step
        rm "$idx" "$ref""#,
        o = outside.display()
    );
    let id = spawn_in_session_with(&g, "walk", &["--jail"], &script);
    let log = g.succeeded_log(&id);
    let expected = trees_printed(&log);
    assert_eq!(expected.len(), 7, "{log}");
    let recorded = trees_recorded(&g, "walk");
    assert_eq!(recorded, expected, "{log}");
    let listing = git_in(&g.repo, &["ls-tree", "-r", &recorded[3]]);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("120000 blob") && l.ends_with("\tkeep")),
        "{listing}"
    );
    assert!(!listing.contains("keep/"), "{listing}");
}

/// Refs of checkpoints compacted before refs were deleted with them (made by hand
/// here: two of a session that is gone, one past its session's last checkpoint) are
/// swept when the daemon starts; those whose checkpoints exist stay, and so does one an
/// agent still queued is based on, which then runs on its code.
#[test]
fn checkpoint_refs_no_checkpoint_names_are_swept_at_start() {
    let (g, c) = two_checkpoints_with_refs();
    drop(c);
    let tip = git_in(&g.repo, &["rev-parse", "refs/grove/checkpoints/orig/2"]);
    for orphan in ["gone/5", "gone/6", "orig/77"] {
        g.git(&[
            "update-ref",
            &format!("refs/grove/checkpoints/{orphan}"),
            tip.trim(),
        ]);
    }
    let (holder, hold) = g.spawn_gated(&[], "", "");
    let queued = g.spawn(&["--base", "refs/grove/checkpoints/gone/6"], "cat work.txt");
    assert_eq!(g.status(&queued), "queued");

    g.ok(&["daemon", "restart"]);
    wait_for_refs(
        &g,
        &[
            "refs/grove/checkpoints/gone/6",
            "refs/grove/checkpoints/orig/1",
            "refs/grove/checkpoints/orig/2",
        ],
    );
    fs::write(&hold, "").expect("hold");
    assert_eq!(g.wait(&holder)["outcome"], "succeeded");
    let done = g.wait(&queued);
    assert_eq!(done["outcome"], "succeeded", "{done}");
    assert_eq!(g.ok(&["logs", &queued]), "2\n");
}

/// The tree `git add -A` makes of an agent's worktree, printed as a `tree` line.
const PRINT_TREE: &str = r#"idx=$(mktemp -u); GIT_INDEX_FILE=$idx git add -A; echo "tree $(GIT_INDEX_FILE=$idx git write-tree)"; rm -f "$idx""#;

/// state-semantics.md 29 and 30: a checkpoint's code has its ref from the moment it is
/// stored, so the user's own `git reflog expire --expire=now --all` and `git gc
/// --prune=now`, with the agent's branch deleted, take none of it: `fork --spawn` of
/// each checkpoint starts an agent on exactly the files it recorded. A refused update
/// leaves no hold; compaction and `session rm` leave no ref behind.
#[test]
fn the_users_git_gc_never_takes_the_code_of_a_checkpoint() {
    let g = grove_with_schema();
    let writer = spawn_in_session(
        &g,
        "orig",
        r#"set -e
        for n in 1 2 3; do
            echo "$n" > work.txt; echo "only in $n" > "untracked-$n.txt"; rm -f "untracked-$((n-1)).txt"
            "$GROVE_BIN" state update count 1
        done
        ! "$GROVE_BIN" state update nope 1"#,
    );
    g.succeeded_log(&writer);
    let recorded = trees_recorded(&g, "orig");
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert_eq!(
        grove_refs(&g, "refs/grove/recording/"),
        Vec::<String>::new()
    );
    g.git(&["branch", "-D", &format!("grove/{writer}")]);
    g.git(&["reflog", "expire", "--expire=now", "--all"]);
    g.git(&["gc", "--prune=now", "--quiet"]);

    for (n, tree) in (1..=3).zip(&recorded) {
        let log = fork_printing_tree(&g, "orig", &n.to_string(), &format!("retry-{n}"));
        assert_eq!(
            trees_printed(&log),
            [tree.as_str()],
            "checkpoint {n}: {log}"
        );
    }
    let forks: Vec<String> = (1..=3)
        .map(|n| format!("refs/grove/checkpoints/retry-{n}/1"))
        .collect();
    let origs: Vec<String> = (1..=3)
        .map(|n| format!("refs/grove/checkpoints/orig/{n}"))
        .collect();
    let everything: Vec<&str> = origs.iter().chain(&forks).map(String::as_str).collect();
    wait_for_refs(&g, &everything);

    g.ok(&["state", "compact", "--session", "orig", "--keep", "1"]);
    g.ok(&["session", "rm", "retry-1"]);
    wait_for_refs(&g, &[&origs[2], &forks[1], &forks[2]]);
    g.ok(&["session", "rm", "orig"]);
    wait_for_refs(&g, &[&forks[1], &forks[2]]);
    // A fork's own ref holds its code after its origin is gone.
    g.git(&["gc", "--prune=now", "--quiet"]);
    let log = fork_printing_tree(&g, "retry-3", "1", "again");
    assert_eq!(trees_printed(&log), [recorded[2].as_str()], "{log}");
}

/// `grove state fork --spawn` of checkpoint `at` of `from` into `session`, with an agent
/// that prints the tree of its checkout; its log once it succeeded.
fn fork_printing_tree(g: &Grove, from: &str, at: &str, session: &str) -> String {
    let out = g.ok(&[
        "--json",
        "state",
        "fork",
        "--from",
        from,
        "--at",
        at,
        "--session",
        session,
        "--spawn",
        "--",
        "sh",
        "-c",
        PRINT_TREE,
    ]);
    let record: Value = serde_json::from_str(&out).expect("the new agent's record");
    g.succeeded_log(record["id"].as_str().expect("id"))
}

/// A hold a crash left after its checkpoint was stored becomes the checkpoint's ref at
/// the next start; one whose update was never stored goes.
#[test]
fn holds_a_crash_left_are_settled_at_start() {
    let (g, c) = two_checkpoints_with_refs();
    drop(c);
    let writer = checkpoints(&g, "orig")[0]["writer"]
        .as_str()
        .expect("writer")
        .to_string();
    let tree = git_in(
        &g.repo,
        &["rev-parse", "refs/grove/checkpoints/orig/2^{tree}"],
    );
    let stored = git_in(&g.repo, &["commit-tree", tree.trim(), "-m", "held"]);
    let empty = git_in(&g.repo, &["hash-object", "-t", "tree", "-w", "/dev/null"]);
    let never = git_in(
        &g.repo,
        &["commit-tree", empty.trim(), "-m", "never stored"],
    );
    g.git(&["update-ref", "-d", "refs/grove/checkpoints/orig/2"]);
    for commit in [&stored, &never] {
        let name = format!("refs/grove/recording/{writer}/{}", commit.trim());
        g.git(&["update-ref", &name, commit.trim()]);
    }

    g.ok(&["daemon", "restart"]);
    wait_for_refs(
        &g,
        &[
            "refs/grove/checkpoints/orig/1",
            "refs/grove/checkpoints/orig/2",
        ],
    );
    eventually("the holds gone", std::time::Duration::from_secs(10), || {
        grove_refs(&g, "refs/grove/recording/").is_empty()
    });
    assert_eq!(
        git_in(&g.repo, &["rev-parse", "refs/grove/checkpoints/orig/2"]).trim(),
        stored.trim()
    );
}

/// `grove state code` is the command line of `state.code`: it names the code of a
/// checkpoint (the ref first, for `grove spawn --base`), answers what the socket
/// answers with `--json`, works inside an agent for its own session, and refuses a
/// checkpoint without code or one that does not exist, saying why.
#[test]
fn state_code_on_the_command_line_names_the_code_of_a_checkpoint() {
    let g = grove_with_schema();
    run_in_orig(
        &g,
        r#"echo one > work.txt && "$GROVE_BIN" state update count 1"#,
    );
    g.state_update("orig", &["count", "1"]);
    let reference = "refs/grove/checkpoints/orig/1";

    let shown = g.json(&["state", "code", "--session", "orig", "1"]);
    let asked = call(
        &mut client(&g),
        "state.code",
        serde_json::json!({"session": "orig", "at": 1}),
    )
    .expect("state.code");
    assert_eq!(shown, asked);
    assert_eq!(shown["ref"], reference);
    assert_eq!(
        shown["commit"].as_str().expect("commit"),
        git_in(&g.repo, &["rev-parse", reference]).trim()
    );
    assert_eq!(
        shown["tree"].as_str(),
        Some(trees_recorded(&g, "orig")[0].as_str())
    );
    let tree = shown["tree"].as_str().expect("tree");
    assert_eq!(tree_file(&g.repo, tree, "work.txt"), "one\n");

    let plain = g.ok(&["state", "code", "--session", "orig", "1"]);
    assert_eq!(plain.lines().next(), Some(reference), "{plain}");
    let commit = shown["commit"].as_str().expect("commit");
    assert!(
        plain.contains(commit) && plain.contains("grove spawn"),
        "{plain}"
    );

    let inside = spawn_in_session(&g, "orig", r#""$GROVE_BIN" state code 1 | head -n 1"#);
    assert_eq!(g.succeeded_log(&inside), format!("{reference}\n"));

    g.refused(
        &["state", "code", "--session", "orig", "2"],
        "records no code",
    );
    g.refused(
        &["state", "code", "--session", "orig", "9"],
        "no checkpoint 9",
    );
    let help = g.ok(&["state", "code", "--help"]);
    assert!(help.contains("grove spawn --base"), "{help}");
}

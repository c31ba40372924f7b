//! A tree of agents (an agent the user spawned and its descendants) holds at most
//! `tree_max_db` of grove.db: a jailed tree flooding its sessions with large values
//! is refused once it holds that much, across a daemon restart too, while the user
//! and other trees keep writing.

mod support;

use std::path::Path;
use support::*;

/// A channel that keeps whatever was written last: each write stores its whole value.
const BLOB_SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
blob = { reducer = "overwrite" }
"#;

/// Writes a 100 KB value up to $WRITES times, then says how it went on its output:
/// `REFUSED after N: exit CODE: MESSAGE`, or `WROTE N`.
const FLOOD: &str = r#"
printf '{"blob":"%s"}' "$(head -c 100000 /dev/zero | tr '\0' x)" > blob.json
n=0
while [ $n -lt "$WRITES" ]; do
  "$GROVE_BIN" state update --file blob.json >/dev/null 2>err.txt; code=$?
  if [ $code -ne 0 ]; then echo "REFUSED after $n: exit $code: $(cat err.txt)"; exit 0; fi
  n=$((n+1))
done
echo "WROTE $n"
"#;

/// The root spawns three children, all four flood, the root waits for its children.
const TREE: &str = r#"
ids=""
for c in 1 2 3; do
  id=$("$GROVE_BIN" spawn --env "GROVE_BIN=$GROVE_BIN" --env "WRITES=$WRITES" \
       --env "FLOOD=$FLOOD" -- sh -c "$FLOOD") || exit 1
  ids="$ids $id"
done
sh -c "$FLOOD"
"$GROVE_BIN" wait $ids > /dev/null
"#;

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Bytes of grove.db and its log.
fn db_bytes(g: &Grove) -> u64 {
    size(&g.home.join("grove.db")) + size(&g.home.join("grove.db-wal"))
}

/// Spawns the flooding tree (jailed) writing `writes` times per agent, waits for all of
/// it; each agent's last line of output.
fn flood_tree(g: &Grove, writes: u32) -> Vec<String> {
    let writes = writes.to_string();
    let env = [
        format!("GROVE_BIN={BIN}"),
        format!("WRITES={writes}"),
        format!("FLOOD={FLOOD}"),
    ];
    let mut flags = vec!["--jail", "--session", "flood"];
    for e in &env {
        flags.extend(["--env", e.as_str()]);
    }
    let root = g.spawn(&flags, TREE);
    assert_eq!(
        g.wait(&root)["outcome"],
        "succeeded",
        "{}",
        g.ok(&["logs", &root])
    );
    let mut tree = vec![root.clone()];
    tree.extend(
        g.all_agents()
            .iter()
            .filter(|a| a["parent"] == root.as_str())
            .map(|a| a["id"].as_str().expect("id").to_string()),
    );
    assert_eq!(tree.len(), 4, "the root spawned three children");
    tree.iter()
        .map(|id| {
            g.wait(id);
            let log = g.ok(&["logs", id]);
            log.lines().last().unwrap_or_default().to_string()
        })
        .collect()
}

fn grove_with_blobs(budget: &str) -> Grove {
    let g = Grove::new().with_env(&[("GROVE_TREE_MAX_DB", budget)]);
    commit_schema(&g, BLOB_SCHEMA);
    g
}

#[test]
fn a_flooding_tree_is_refused_at_tree_max_db_and_the_user_and_other_trees_still_write() {
    if !have_landlock() {
        return;
    }
    let g = grove_with_blobs("3M");
    g.ok(&["session", "list"]);
    let before = db_bytes(&g);
    let outcomes = flood_tree(&g, 30);
    for outcome in &outcomes {
        assert!(
            outcome.starts_with("REFUSED after")
                && outcome.contains("exit 4")
                && outcome.contains("tree_max_db")
                && outcome.contains("nothing of it was stored")
                && outcome.contains("grove kill"),
            "every agent of the tree is refused: {outcomes:?}"
        );
    }
    let written: u64 = outcomes
        .iter()
        .filter_map(|o| {
            o.strip_prefix("REFUSED after ")?
                .split(':')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    // 3M holds 31 of them (100 KB and 256 bytes each), the children's spawns aside.
    assert!(
        (25..=31).contains(&written),
        "{written} writes of 100 KB in 3M: {outcomes:?}"
    );
    let grew = db_bytes(&g).saturating_sub(before);
    println!("a tree refused at 3M grew grove.db (+wal) by {grew} bytes after {written} writes");
    assert!(
        grew <= 9 << 20,
        "grove.db grew {grew} bytes with a 3M budget"
    );

    // The user's own writes never count, and another tree has its own share.
    g.ok(&[
        "state",
        "update",
        "--session",
        "flood",
        "blob",
        "\"the user's\"",
    ]);
    let other = spawn_in_session_with(
        &g,
        "other",
        &["--jail"],
        r#"printf '{"blob":"%s"}' "$(head -c 100000 /dev/zero | tr '\0' y)" > b.json &&
           "$GROVE_BIN" state update --file b.json && echo OTHER-WROTE"#,
    );
    assert!(g.succeeded_log(&other).contains("OTHER-WROTE"));
    assert!(metric_sum(&g, "grove_tree_db_refused_total") >= 4.0);
}

#[test]
fn the_same_tree_with_a_large_budget_writes_well_past_the_small_one() {
    if !have_landlock() {
        return;
    }
    let g = grove_with_blobs("1G");
    g.ok(&["session", "list"]);
    let before = db_bytes(&g);
    let outcomes = flood_tree(&g, 30);
    assert!(
        outcomes.iter().all(|o| o == "WROTE 30"),
        "nothing refused under 1G: {outcomes:?}"
    );
    let grew = db_bytes(&g).saturating_sub(before);
    println!("the same tree under 1G grew grove.db (+wal) by {grew} bytes");
    assert!(
        grew >= 10 << 20,
        "only {grew} bytes: the control did not write much"
    );
}

/// Writes until refused, says so, then once `go` is in its worktree tries again.
const FILL_THEN_RETRY: &str = r#"
printf '{"blob":"%s"}' "$(head -c 100000 /dev/zero | tr '\0' x)" > blob.json
n=0
while "$GROVE_BIN" state update --file blob.json >/dev/null 2>err.txt; do
  n=$((n+1)); [ $n -gt 100 ] && { echo NEVER-REFUSED; exit 1; }
done
echo "FULL after $n"
while [ ! -e go ]; do sleep 0.05; done
"$GROVE_BIN" state update --file blob.json >/dev/null 2>err.txt; code=$?
echo "AFTER RESTART exit $code: $(cat err.txt)"
"#;

#[test]
fn a_restart_gives_a_tree_nothing_back() {
    if !have_landlock() {
        return;
    }
    let g = grove_with_blobs("1M");
    let id = spawn_in_session_with(&g, "flood", &["--jail"], FILL_THEN_RETRY);
    eventually(
        "the agent fills its tree's share",
        std::time::Duration::from_secs(60),
        || g.ok(&["logs", &id]).contains("FULL after"),
    );
    g.ok(&["daemon", "restart"]);
    let worktree = g.record(&id)["worktree"]
        .as_str()
        .expect("worktree")
        .to_string();
    std::fs::write(Path::new(&worktree).join("go"), "").expect("go");
    let log = g.succeeded_log(&id);
    let after = log
        .lines()
        .find(|l| l.starts_with("AFTER RESTART"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        after.contains("exit 4") && after.contains("tree_max_db"),
        "the restarted daemon still holds the tree to its share: {after}"
    );
    g.ok(&["state", "update", "--session", "flood", "blob", "1"]);
}

#[test]
fn an_invalid_tree_max_db_is_refused_with_what_to_write() {
    let g = Grove::new().with_env(&[("GROVE_TREE_MAX_DB", "lots")]);
    let said = [
        "GROVE_TREE_MAX_DB",
        "`tree_max_db` = \"lots\"",
        "expected a size such as 512M",
    ];
    g.run(&["config"]).assert_exit(2, &said);
    // No daemon starts on it, so nothing runs with a budget it did not ask for.
    let out = g.fails(&["session", "list"], &said);
    assert!(out.stderr.contains("did not start"), "{}", out.stderr);
    let g = Grove::new();
    g.write_config("tree_max_db = \"3 lots\"\n");
    g.run(&["config"])
        .assert_exit(2, &["config.toml", "tree_max_db", "expected a size"]);
}

/// With $MODE `fork`, forks its session, with `spawn`, spawns children with a 100 KB
/// variable each, until refused: `DONE N exit CODE: MESSAGE`.
const FORK_OR_SPAWN: &str = r#"
printf '{"blob":"%s"}' "$(head -c 100000 /dev/zero | tr '\0' x)" > blob.json
"$GROVE_BIN" state update --file blob.json > /dev/null || exit 1
big=$(head -c 100000 /dev/zero | tr '\0' y)
n=0
while [ $n -le 100 ]; do
  if [ "$MODE" = fork ]; then
    "$GROVE_BIN" state fork --at 1 --session "fork-$n" >/dev/null 2>err.txt
  else
    id=$("$GROVE_BIN" spawn --env "BIG=$big" -- true 2>err.txt) && "$GROVE_BIN" wait "$id" >/dev/null
  fi
  code=$?
  [ $code -ne 0 ] && break
  n=$((n+1))
done
echo "DONE $n exit $code: $(cat err.txt)"
"#;

#[test]
fn forks_and_children_count_against_the_tree_too() {
    if !have_landlock() {
        return;
    }
    for mode in ["fork", "spawn"] {
        // The control is the larger budget: about three times as many fit.
        let done: Vec<u64> = ["1M", "3M"]
            .iter()
            .map(|budget| {
                let g = grove_with_blobs(budget);
                let env = format!("MODE={mode}");
                let id =
                    spawn_in_session_with(&g, "flood", &["--jail", "--env", &env], FORK_OR_SPAWN);
                let log = g.succeeded_log(&id);
                let line = log
                    .lines()
                    .find(|l| l.starts_with("DONE"))
                    .unwrap_or_else(|| panic!("{log}"));
                assert!(
                    line.contains("exit 4") && line.contains("tree_max_db"),
                    "{mode}: {line}"
                );
                println!("{mode} under {budget}: {line}");
                line.split(' ')
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .expect("count")
            })
            .collect();
        assert!(
            (7..=10).contains(&done[0]),
            "{mode}: {done:?} of 100 KB in 1M"
        );
        assert!(
            (27..=30).contains(&done[1]),
            "{mode}: {done:?} of 100 KB in 3M"
        );
    }
}

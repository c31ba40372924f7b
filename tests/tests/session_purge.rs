//! `grove session rm --purge` (issue 34, item 7): the session, its checkpoints and
//! their code refs, its agents' records, logs and branches go, salvage refs stay unless
//! asked, and the audit row says what went; every refusal changes nothing.

mod support;

use serde_json::Value;
use support::*;

/// A grove whose session `work` has two finished agents, one with a commit on its
/// branch, both having written checkpoints with code; and their records.
fn session_of_two_agents() -> (Grove, Vec<Value>) {
    let g = Grove::new();
    commit_schema(&g, COUNTER_SCHEMA);
    let committer = spawn_in_session(
        &g,
        "work",
        r#"set -e
        echo work > work.txt
        git add work.txt
        git -c user.name=a -c user.email=a@b commit -qm work
        "$GROVE_BIN" state update count 1"#,
    );
    let writer = spawn_in_session(&g, "work", r#""$GROVE_BIN" state update count 2"#);
    g.succeeded_log(&committer);
    g.succeeded_log(&writer);
    let records = vec![g.record(&committer), g.record(&writer)];
    assert_eq!(records[0]["branch_exists"], true, "{}", records[0]);
    (g, records)
}

fn id(record: &Value) -> &str {
    record["id"].as_str().expect("id")
}

fn branch(record: &Value) -> &str {
    record["branch"].as_str().expect("branch")
}

fn refs_under(g: &Grove, prefix: &str) -> String {
    g.git(&["for-each-ref", "--format=%(refname)", prefix])
}

/// What must be as it was after a refused purge.
fn assert_nothing_went(g: &Grove, records: &[Value]) {
    let listed: Vec<String> = g.all_agents().iter().map(|a| id(a).to_string()).collect();
    for record in records {
        assert!(listed.contains(&id(record).to_string()), "{listed:?}");
        assert!(g.home.join("agents").join(id(record)).exists());
    }
    assert!(g.git(&["branch"]).contains(branch(&records[0])));
    assert!(!refs_under(g, "refs/grove/checkpoints/work").is_empty());
    g.ok(&["session", "show", "work"]);
}

#[test]
fn purge_deletes_the_session_its_agents_and_their_refs_keeping_salvage() {
    let (g, records) = session_of_two_agents();
    let tip = g
        .git(&["rev-parse", branch(&records[0])])
        .trim()
        .to_string();
    assert!(!refs_under(&g, "refs/grove/checkpoints/work").is_empty());
    // A salvage ref of one of them, as an earlier discard leaves.
    let salvage = format!("refs/grove/salvage/discarded-{}", id(&records[1]));
    g.git(&["update-ref", &salvage, &tip]);

    let out = g.ok(&["session", "rm", "--purge", "--yes", "work"]);
    assert!(
        out.contains(&format!("git branch {} {tip}", branch(&records[0]))),
        "the purge says how to bring the branch back: {out}"
    );

    let listed: Vec<String> = g.all_agents().iter().map(|a| id(a).to_string()).collect();
    let branches = g.git(&["branch"]);
    for record in &records {
        assert!(!listed.contains(&id(record).to_string()), "{listed:?}");
        assert!(
            !g.home.join("agents").join(id(record)).exists(),
            "its logs stay"
        );
        assert!(!branches.contains(branch(record)), "{branches}");
    }
    assert_eq!(refs_under(&g, "refs/grove/checkpoints/work"), "");
    assert_eq!(
        refs_under(&g, &salvage).trim(),
        salvage,
        "salvage refs stay"
    );
    g.fails(&["session", "show", "work"], &["no session"]);

    let log = g.json(&["gc", "--log"]);
    let row = each(&log, "sessions")
        .find(|r| r["session"] == "work")
        .unwrap_or_else(|| panic!("no audit row: {log}"));
    let purged = &row["purged"];
    let mut agents: Vec<&str> = each(purged, "agents").filter_map(Value::as_str).collect();
    agents.sort();
    let mut expected: Vec<&str> = records.iter().map(id).collect();
    expected.sort();
    assert_eq!(agents, expected, "{row}");
    let deleted = each(purged, "branches")
        .find(|b| b["name"] == branch(&records[0]))
        .unwrap_or_else(|| panic!("{row}"));
    assert_eq!(deleted["commit"], tip.as_str());
    assert!(each(purged, "checkpoint_refs").count() >= 2, "{row}");
    assert_eq!(each(purged, "salvage_refs").count(), 0, "{row}");
    let shown = g.ok(&["gc", "--log"]);
    assert!(
        shown.contains("2 agents, 1 branches"),
        "the audit line says what went: {shown}"
    );
}

#[test]
fn purge_with_salvage_too_deletes_the_agents_salvage_refs() {
    let (g, records) = session_of_two_agents();
    let salvage = format!("refs/grove/salvage/discarded-{}", id(&records[1]));
    g.git(&["update-ref", &salvage, "HEAD"]);
    let other = "refs/grove/salvage/not-of-this-session";
    g.git(&["update-ref", other, "HEAD"]);
    let out = g.ok(&["session", "rm", "--purge", "--yes", "--salvage-too", "work"]);
    assert!(out.contains(&salvage), "{out}");
    assert_eq!(refs_under(&g, &salvage), "");
    assert_eq!(
        refs_under(&g, other).trim(),
        other,
        "another's salvage stays"
    );
}

#[test]
fn purge_without_a_terminal_or_yes_is_refused_and_changes_nothing() {
    let (g, records) = session_of_two_agents();
    g.refused_all(
        &["session", "rm", "--purge", "work"],
        &["no terminal", "--yes", "nothing was deleted"],
    );
    assert_nothing_went(&g, &records);
}

#[test]
fn purge_with_a_live_agent_is_refused_naming_it_and_changes_nothing() {
    let (g, records) = session_of_two_agents();
    let gate = g.files().join("gate");
    let live = spawn_in_session(
        &g,
        "work",
        &format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display()),
    );
    eventually("it runs", std::time::Duration::from_secs(30), || {
        g.status(&live) == "running"
    });
    g.fails(
        &["session", "rm", "--purge", "--yes", "work"],
        &[&live, "grove kill", "nothing was deleted"],
    );
    assert_nothing_went(&g, &records);
    std::fs::write(&gate, "").expect("gate");
    g.wait(&live);
}

#[test]
fn purge_of_an_unknown_session_is_refused_and_changes_nothing() {
    let (g, records) = session_of_two_agents();
    g.fails(
        &["session", "rm", "--purge", "--yes", "nosuch"],
        &["no session `nosuch`", "nothing was deleted"],
    );
    assert_nothing_went(&g, &records);
}

/// Runs `grove session rm --purge work` on a terminal of its own (python's pty), answers
/// its question with `answer`; what the terminal showed.
fn purge_on_a_terminal(g: &Grove, answer: &str) -> String {
    const DRIVER: &str = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "session", "rm", "--purge", "work"])
shown = b""
while b"[y/N]" not in shown:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    shown += chunk
os.write(fd, sys.argv[2].encode() + b"\n")
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    shown += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(shown.decode(errors="replace"))
sys.stdout.write("\nrc=%d\n" % os.waitstatus_to_exitcode(status))
"#;
    let grove = g.command();
    let mut driver = std::process::Command::new("python3");
    for (key, value) in grove.get_envs() {
        match value {
            Some(value) => driver.env(key, value),
            None => driver.env_remove(key),
        };
    }
    driver
        .current_dir(&g.repo)
        .arg("-c")
        .arg(DRIVER)
        .arg(grove.get_program())
        .arg(answer);
    stdout_of(&mut driver, "the terminal's driver")
}

#[test]
fn on_a_terminal_purge_asks_first_and_a_no_changes_nothing() {
    if !have_python3() {
        return;
    }
    let (g, records) = session_of_two_agents();
    let shown = purge_on_a_terminal(&g, "n");
    for record in &records {
        assert!(shown.contains(id(record)), "it names what goes: {shown}");
    }
    assert!(
        shown.contains("nothing was deleted") && shown.contains("rc=1"),
        "{shown}"
    );
    assert_nothing_went(&g, &records);

    let shown = purge_on_a_terminal(&g, "y");
    assert!(
        shown.contains("deleted session work") && shown.contains("rc=0"),
        "{shown}"
    );
    g.fails(&["session", "show", "work"], &["no session"]);
}

#[test]
fn purge_with_a_kept_worktree_is_refused_naming_it_and_changes_nothing() {
    let (g, records) = session_of_two_agents();
    let kept = spawn_in_session_with(&g, "work", &["--keep"], "echo kept > kept.txt");
    g.wait(&kept);
    let worktree = g.record(&kept)["worktree"]
        .as_str()
        .expect("worktree")
        .to_string();
    g.fails(
        &["session", "rm", "--purge", "--yes", "work"],
        &[&kept, "grove rm", "nothing was deleted"],
    );
    assert_nothing_went(&g, &records);
    assert!(std::path::Path::new(&worktree).exists(), "its work stays");
}

#[test]
fn purge_of_a_branch_checked_out_is_refused_before_any_ref_goes() {
    let (g, records) = session_of_two_agents();
    g.git(&["checkout", "-q", branch(&records[0])]);
    g.fails(
        &["session", "rm", "--purge", "--yes", "work"],
        &[branch(&records[0]), "checked out in", "nothing was deleted"],
    );
    assert_nothing_went(&g, &records);
}

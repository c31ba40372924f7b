//! An agent's automatic session exists only once the agent writes state, and goes with
//! its record at retention (with an audit row beside the other removals), unless an
//! agent still on record uses it; sessions the user named stay.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

const SCHEMA: &str = COUNTER_SCHEMA;

fn session_names(g: &Grove) -> Vec<String> {
    g.json(&["session", "list", "--all"])["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect()
}

fn removed_sessions(g: &Grove) -> Vec<Value> {
    g.json(&["gc", "--log"])["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn an_agents_own_session_goes_with_its_record_and_a_named_one_stays() {
    let g = Grove::new().with_env(&[("GROVE_RETENTION", "1ms")]);
    commit_schema(&g, SCHEMA);
    let bin = format!("GROVE_BIN={BIN}");
    let own = g.spawn(&["--env", &bin], "\"$GROVE_BIN\" state update count 1");
    let named = g.spawn(&["--session", "kept"], "true");
    g.wait(&own);
    g.wait(&named);
    let before = session_names(&g);
    assert!(
        before.contains(&own) && before.contains(&"kept".to_string()),
        "{before:?}"
    );

    g.ok(&["gc"]);
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    let after = session_names(&g);
    assert!(!after.contains(&own), "{after:?}");
    assert!(after.contains(&"kept".to_string()), "{after:?}");
    let rows = removed_sessions(&g);
    let row = rows
        .iter()
        .find(|r| r["session"] == own.as_str())
        .unwrap_or_else(|| panic!("no audit row for {own}: {rows:?}"));
    assert_eq!(row["by"], "grove");
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("retention")),
        "{row}"
    );
}

#[test]
fn an_own_session_stays_while_a_child_on_record_still_uses_it() {
    let g = Grove::new().with_env(&[("GROVE_RETENTION", "1ms")]);
    let gate = g.dir.path().join("gate");
    // The parent spawns a child into its own session (the only one it may use), and
    // ends; the child runs on.
    let parent = g.spawn(
        &["--env", &format!("GROVE_BIN={BIN}")],
        &format!(
            "\"$GROVE_BIN\" spawn --session \"$GROVE_SESSION\" -- sh -c \"while [ ! -e '{}' ]; do sleep 0.02; done\"",
            gate.display()
        ),
    );
    g.wait(&parent);
    let child = g.json(&["list", "--all"])["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["parent"] == parent.as_str())
        .and_then(|a| a["id"].as_str().map(String::from))
        .expect("the child");
    assert_eq!(g.record(&child)["session"], parent.as_str());
    g.ok(&["gc"]);
    assert!(session_names(&g).contains(&parent), "still used by {child}");
    std::fs::write(&gate, "").expect("gate");
    g.wait(&child);
    g.ok(&["gc"]);
    assert!(!session_names(&g).contains(&parent));
}

#[test]
fn an_agents_own_session_exists_only_once_the_agent_writes_state() {
    let g = Grove::new().with_env(&[("GROVE_RETENTION", "1ms")]);
    commit_schema(&g, SCHEMA);
    let gate = g.dir.path().join("gate");
    let bin = format!("GROVE_BIN={BIN}");
    let silent = g.spawn(&[], "true");
    let writer = g.spawn(
        &["--env", &bin],
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.02; done; \"$GROVE_BIN\" state update count 2",
            gate.display()
        ),
    );
    g.wait(&silent);
    assert_eq!(g.record(&writer)["status"], "running");
    let before = session_names(&g);
    assert!(
        !before.contains(&silent) && !before.contains(&writer),
        "no agent wrote yet: {before:?}"
    );

    // The session is made at the agent's first write, with the schema of its spawn,
    // also after a restart of the daemon in between.
    g.ok(&["daemon", "restart"]);
    std::fs::write(&gate, "").expect("gate");
    assert_eq!(
        g.wait(&writer)["outcome"],
        "succeeded",
        "{}",
        g.ok(&["logs", &writer])
    );
    let after = session_names(&g);
    assert!(after.contains(&writer), "{after:?}");
    assert!(!after.contains(&silent), "{after:?}");
    assert_eq!(
        g.ok(&["state", "get", "--session", &writer, "count"])
            .trim(),
        "2"
    );

    // At retention both go; only the written one leaves an audit row.
    g.ok(&["gc"]);
    eventually("both records gone", Duration::from_secs(10), || {
        g.json(&["list", "--all"])["agents"] == serde_json::json!([])
    });
    assert!(!session_names(&g).contains(&writer));
    let rows = removed_sessions(&g);
    let audited: Vec<&str> = rows.iter().filter_map(|r| r["session"].as_str()).collect();
    assert!(audited.contains(&writer.as_str()), "{rows:?}");
    assert!(!audited.contains(&silent.as_str()), "{rows:?}");
    let out = g.run(&["state", "get", "--session", &silent]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

/// A grandchild writes into the automatic session of the agent at the top (its parent
/// spawned it there): the session goes once the last of them goes, not before, and is
/// not left behind when the grandchild outlives both.
#[test]
fn an_own_session_goes_after_a_grandchild_that_used_it() {
    let g = Grove::new().with_env(&[("GROVE_RETENTION", "1ms")]);
    commit_schema(&g, SCHEMA);
    let gate = g.dir.path().join("gate");
    let grandchild_sh = g.dir.path().join("grandchild.sh");
    let child_sh = g.dir.path().join("child.sh");
    std::fs::write(
        &grandchild_sh,
        format!(
            "\"$GROVE_BIN\" state update count 1\nwhile [ ! -e '{}' ]; do sleep 0.02; done\n",
            gate.display()
        ),
    )
    .expect("grandchild.sh");
    let spawn_into_session = |script: &std::path::Path| {
        format!(
            "\"$GROVE_BIN\" spawn --session \"$GROVE_SESSION\" --env \"GROVE_BIN=$GROVE_BIN\" \
             -- sh '{}'",
            script.display()
        )
    };
    std::fs::write(&child_sh, spawn_into_session(&grandchild_sh)).expect("child.sh");
    let top = g.spawn(
        &["--env", &format!("GROVE_BIN={BIN}")],
        &spawn_into_session(&child_sh),
    );
    g.wait(&top);
    let child_of = |parent: &str| {
        let mut found = None;
        eventually("a child", Duration::from_secs(30), || {
            found = g.json(&["list", "--all"])["agents"]
                .as_array()
                .expect("agents")
                .iter()
                .find(|a| a["parent"] == parent)
                .and_then(|a| a["id"].as_str().map(String::from));
            found.is_some()
        });
        found.expect("child")
    };
    let child = child_of(&top);
    g.wait(&child);
    let grandchild = child_of(&child);
    assert_eq!(g.record(&grandchild)["session"], top.as_str());
    eventually("the grandchild wrote", Duration::from_secs(30), || {
        session_names(&g).contains(&top)
    });

    g.ok(&["gc"]);
    assert!(
        session_names(&g).contains(&top),
        "still used by {grandchild}"
    );
    std::fs::write(&gate, "").expect("gate");
    g.wait(&grandchild);
    g.ok(&["gc"]);
    assert!(!session_names(&g).contains(&top), "left behind");
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    let rows = removed_sessions(&g);
    assert!(
        rows.iter().any(|r| r["session"] == top.as_str()),
        "{rows:?}"
    );
}

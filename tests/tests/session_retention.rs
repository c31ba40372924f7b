//! An agent's automatic session goes with its record at retention (with an audit row
//! beside the other removals), unless an agent still on record uses it; sessions the
//! user named stay.

mod support;

use serde_json::Value;
use support::*;

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
    let own = g.spawn(&[], "true");
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

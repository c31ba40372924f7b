//! Issue 30, item 1: `waiting` is right for the real CLIs at their first screens, a
//! prompt or a dialog waiting for the user, whatever thread of theirs reads the
//! terminal (Codex is tokio's many threads; Gemini CLI and Claude Code are node; aider
//! is Python). Each is spawned as a user would (`--agent NAME`, no network, fake keys)
//! and must be shown `waiting` by `grove wait --until waiting --timeout 60s` and `grove
//! list` once its screen is up. The screens are the pinned versions' (support/clis.rs).
#![cfg(target_os = "linux")]

mod support;

use std::fs;
use support::clis::*;
use support::*;

/// Brings `name` to the screen `markers[want]`, unjailed and jailed (where the machine
/// can jail), and insists that grove shows it waiting there.
fn waits_at(g: &Grove, name: &str, extra: &[&str], markers: &[&str; 2], want: usize) {
    waits_at_in(g, name, false, extra, markers, want);
    if have_landlock() && writable_cgroup2().is_some() {
        waits_at_in(g, name, true, extra, markers, want);
    }
}

fn waits_at_in(
    g: &Grove,
    name: &str,
    jailed: bool,
    extra: &[&str],
    markers: &[&str; 2],
    want: usize,
) {
    let (id, screen) = first_screen(g, name, jailed, extra, markers);
    assert!(
        screen.contains(markers[want]),
        "{name} (jailed: {jailed}): expected {:?}:\n{screen}",
        markers[want]
    );
    let waited = g.run(&[
        "--json",
        "wait",
        &id,
        "--until",
        "waiting",
        "--timeout",
        "60s",
    ]);
    assert_eq!(
        waited.code, 0,
        "{name}: {}\n{}",
        waited.stdout, waited.stderr
    );
    let record: serde_json::Value = serde_json::from_str(&waited.stdout).expect("json");
    assert_eq!(record["agents"][0]["activity"], "waiting", "{record}");
    let listed = g.ok(&["list"]);
    let row = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_default();
    assert!(row.contains("waiting"), "{name}: {listed}");
    stop(g, &id);
}

#[test]
fn codex_is_waiting_at_its_trust_question_and_at_its_prompt() {
    if !have_program("codex", &["--version"]) {
        return;
    }
    let g = Grove::new();
    codex_login(&g);
    let config = g.dir.path().join(".codex/config.toml");
    // As on a machine where Codex ran before (it asks for trust only then).
    let ran_before = "[tui]\nscreen_reader_detection_done = true\n";
    fs::write(&config, ran_before).expect("write");
    waits_at(&g, "codex", &[], &[CODEX_ASKS, CODEX_TRUSTS], 0);
    let repo = g.repo.canonicalize().expect("canonical");
    let trusted = format!(
        "{ran_before}[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        repo.display()
    );
    fs::write(&config, trusted).expect("write");
    waits_at(&g, "codex", &[], &[CODEX_ASKS, CODEX_TRUSTS], 1);
}

#[test]
fn gemini_is_waiting_at_its_trust_dialog_and_at_its_sign_in() {
    if !have_program("gemini", &["--version"]) {
        return;
    }
    let g = Grove::new();
    waits_at(&g, "gemini", &[], &[GEMINI_ASKS, GEMINI_TRUSTS], 0);
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("dir")).expect("mkdir");
    let repo = g.repo.canonicalize().expect("canonical");
    fs::write(
        &store,
        format!("{{\"{}\": \"TRUST_FOLDER\"}}", repo.display()),
    )
    .expect("write");
    waits_at(&g, "gemini", &[], &[GEMINI_ASKS, GEMINI_TRUSTS], 1);
}

#[test]
fn aider_is_waiting_at_its_first_question() {
    if !have_program("aider", &["--version"]) {
        return;
    }
    let g = Grove::new();
    waits_at(&g, "aider", &AIDER_OFFLINE, &[AIDER_ASKS, AIDER_ASKS], 0);
}

#[test]
fn claude_is_waiting_at_its_trust_dialog_and_the_question_after() {
    if !have_program("claude", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let config = g.dir.path().join(".claude.json");
    let key = ["--env", "ANTHROPIC_API_KEY=sk-ant-test-not-a-key"];
    fs::write(&config, "{\"hasCompletedOnboarding\": true}").expect("write");
    waits_at(&g, "claude", &key, &[CLAUDE_ASKS, CLAUDE_TRUSTS], 0);
    let repo = g.repo.canonicalize().expect("canonical");
    let trusted = format!(
        "{{\"hasCompletedOnboarding\": true, \"projects\": {{\"{}\": {{\"hasTrustDialogAccepted\": true}}}}}}",
        repo.display()
    );
    fs::write(&config, trusted).expect("write");
    waits_at(&g, "claude", &key, &[CLAUDE_ASKS, CLAUDE_TRUSTS], 1);
}

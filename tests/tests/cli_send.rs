//! Issue 30, item 2: `grove send` submits a line to the real Codex (0.171.0, pinned in
//! .ci/run), whose composer takes an Enter that arrives with the text as part of a
//! paste. Offline with a fake key: a submitted line leaves the composer (Codex shows it
//! as the user's message, or queues it) and Codex then fails to reach its service.
//! `--no-enter` leaves the text in the composer. (The raw mode for scripts, `send
//! --stdin`, is tested with a program that shows what it read, in terminal.rs: whether
//! Codex takes text and a carriage return in one burst as a paste depends on how the
//! bytes fall into its reads, so it cannot stand as a control here.)
#![cfg(target_os = "linux")]

mod support;

use std::fs;
use std::time::{Duration, Instant};
use support::clis::*;
use support::*;

/// The composer is the last line that starts with Codex's prompt mark (earlier ones
/// are the user's messages); empty, it shows a placeholder.
fn composer(screen: &str) -> String {
    screen
        .lines()
        .map(str::trim)
        .rev()
        .find(|l| l.starts_with('\u{203a}'))
        .unwrap_or_default()
        .to_string()
}

/// Codex signed in (a fake key) and trusting the repository, at its prompt and shown
/// `waiting`; its id.
fn codex_at_its_prompt(g: &Grove) -> String {
    codex_login(g);
    let repo = g.repo.canonicalize().expect("canonical");
    let config = format!(
        "[tui]\nscreen_reader_detection_done = true\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        repo.display()
    );
    fs::write(g.dir.path().join(".codex/config.toml"), config).expect("write");
    let (id, screen) = first_screen(g, "codex", false, &[], &[CODEX_ASKS, CODEX_TRUSTS]);
    assert!(screen.contains(CODEX_TRUSTS), "{screen}");
    let waited = g.run(&["wait", &id, "--until", "waiting", "--timeout", "60s"]);
    assert_eq!(waited.code, 0, "{}{}", waited.stdout, waited.stderr);
    id
}

/// Reads the screen until `done` holds of it; that screen.
fn screen_until(g: &Grove, id: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let screen = g.ok(&["screen", id]);
        if done(&screen) {
            return screen;
        }
        assert!(Instant::now() < deadline, "{what}: not so on\n{screen}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn send_submits_a_line_to_codex_and_no_enter_leaves_it_in_the_composer() {
    if !have_program("codex", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let id = codex_at_its_prompt(&g);
    g.ok(&["send", &id, "write the plan down"]);
    // Shown as the user's message (or queued behind Codex's start), the composer
    // empty again.
    screen_until(&g, &id, "codex takes the line as sent", |s| {
        s.contains("write the plan down") && composer(s).contains("Ask Codex")
    });

    g.ok(&["send", "--no-enter", &id, "only a draft"]);
    let screen = screen_until(&g, &id, "the draft stays in the composer", |s| {
        composer(s) == "\u{203a} only a draft"
    });
    assert!(!screen.contains("Ask Codex"), "{screen}");
    stop(&g, &id);
}

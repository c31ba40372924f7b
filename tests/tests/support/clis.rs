//! Driving the real agent CLIs through `grove spawn --agent` (tests/tests/cli_*.rs):
//! their screens as the pinned versions draw them, and reaching one.

use super::{output_fed, Grove};
use std::time::{Duration, Instant};

/// A CLI's first screen can take a while on a loaded machine.
pub const FIRST_SCREEN: Duration = Duration::from_secs(120);

/// Gemini CLI 0.61.0's trust dialog, and its first screen past it without a key.
pub const GEMINI_ASKS: &str = "Do you trust the files in this folder";
pub const GEMINI_TRUSTS: &str = "How would you like to authenticate";
/// Codex 0.171.0's trust question, and the header of its prompt (signed in).
pub const CODEX_ASKS: &str = "Trust this folder?";
pub const CODEX_TRUSTS: &str = "OpenAI Codex (v";
/// Claude Code 2.1.197's trust dialog, and (onboarded, with a key in its environment)
/// the question that follows it.
pub const CLAUDE_ASKS: &str = "Yes, I trust this folder";
pub const CLAUDE_TRUSTS: &str = "Do you want to use this API key";

/// How long a screen past the trust question must stay so before it counts: Codex
/// 0.171.0 draws its prompt first and its trust question about a second later.
pub const SETTLE: Duration = Duration::from_secs(8);

/// Spawns `--agent name` and polls its screen until it asks (`markers[0]`) or shows
/// `markers[1]` for [`SETTLE`]; the screen then, and the agent's id.
pub fn first_screen(
    g: &Grove,
    name: &str,
    jailed: bool,
    extra: &[&str],
    markers: &[&str; 2],
) -> (String, String) {
    let mut args = vec!["spawn", if jailed { "--jail" } else { "--no-jail" }];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--agent", name]);
    let id = g.ok(&args).trim().to_string();
    let deadline = Instant::now() + FIRST_SCREEN;
    let mut past_since = None;
    loop {
        let screen = g.run(&["screen", &id]).stdout;
        if screen.contains(markers[0]) {
            return (id, screen);
        }
        if screen.contains(markers[1]) {
            let since = *past_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= SETTLE {
                return (id, screen);
            }
        }
        if Instant::now() >= deadline || g.status(&id) != "running" {
            let log = g.run(&["logs", &id]).stdout;
            panic!(
                "{name} (jailed: {jailed}) showed none of {markers:?}; status {}, screen:\n{screen}\nlog:\n{log}",
                g.status(&id)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn stop(g: &Grove, id: &str) {
    g.run(&["kill", id]);
    g.wait(id);
}

/// Signs the test's `$HOME` into Codex with a fake key (saved, never checked offline).
pub fn codex_login(g: &Grove) {
    let out = output_fed(
        std::process::Command::new("codex")
            .args(["login", "--with-api-key"])
            .env("HOME", g.dir.path())
            .env_remove("CODEX_HOME"),
        b"sk-test-not-a-key\n",
    );
    assert!(
        out.status.success(),
        "codex login: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// aider 0.86.2's first question in a repository without `.aider*` ignored.
pub const AIDER_ASKS: &str = "Add .aider* to .gitignore";
/// What aider must not do here without network: look for a newer version, report use.
pub const AIDER_OFFLINE: [&str; 4] = [
    "--env",
    "AIDER_CHECK_UPDATE=false",
    "--env",
    "AIDER_ANALYTICS=false",
];

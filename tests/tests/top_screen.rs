//! Issue 30, item 4: `grove top`'s last line of a terminal agent is the screen model's
//! last line with words, not the log's last line, which for a TUI is cursor movement
//! and title sequences.
#![cfg(target_os = "linux")]

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

/// Draws a line by moving the cursor, then ends its output with a title sequence and
/// a cursor move: the log's last line holds no text of the screen.
const DRAWS: &str = r#"printf '\033[2J\033[H+------+\r\n\033[3;5Hhello from the screen\033[6;1H+------+\033[H\033]0;busy\007\033[2;1H'; exec sleep 60"#;

#[test]
fn top_shows_a_terminal_agents_screen_not_its_escapes() {
    let g = Grove::new();
    let id = g.spawn(&["--tty"], DRAWS);
    let mut agent = Value::Null;
    eventually(
        "top reads the agent's screen",
        Duration::from_secs(30),
        || {
            let top = g.json(&["top"]);
            agent = each(&top, "agents")
                .find(|a| a["id"] == id.as_str())
                .cloned()
                .unwrap_or(Value::Null);
            agent["screen_line"] == "hello from the screen"
        },
    );
    // What the log's last line says: rows run together, a title escape made visible.
    let logged = agent["last_log_line"].as_str().unwrap_or("");
    assert!(
        logged != "hello from the screen" && logged.contains("\\e]0;busy"),
        "{agent}"
    );
    let text = g.ok(&["top"]);
    let row = text
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} in {text}"));
    assert!(row.contains("hello from the screen"), "{row}");
    assert!(!row.contains("\\e"), "{row}");

    // Without a terminal the log's line stands.
    let plain = g.spawn(&[], "echo 'a plain line'; exec sleep 60");
    eventually(
        "top reads the plain agent's log",
        Duration::from_secs(30),
        || {
            let top = g.json(&["top"]);
            each(&top, "agents").any(|a| {
                a["id"] == plain.as_str()
                    && a["last_log_line"] == "a plain line"
                    && a.get("screen_line").is_none()
            })
        },
    );
    g.run(&["kill", &id]);
    g.run(&["kill", &plain]);
}

//! Issue 28 item 4, issue 30 item 3: what an agent prints cannot act on the terminal of
//! whoever watches it. `grove attach` on a real pty whose raw bytes the test reads: the
//! agent's clipboard writes and reads, title, reports and queries never arrive, its
//! text does; the shim answers an agent's cursor position query itself, with nobody
//! attached; and `grove trust` shows what it approves escaped, and approves only that.

mod support;

use std::time::Duration;
use support::pty::{attach_on_pty, read_pty_until};
use support::Grove;

const WAIT: Duration = Duration::from_secs(15);

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// An agent that, once a viewer is attached, prints `attack` (printf's format); the
/// agent's id and the raw bytes the viewer's terminal received.
fn viewed(g: &Grove, attack: &str) -> (String, Vec<u8>) {
    std::fs::create_dir_all(g.files()).expect("files");
    let gate = g.files().join("gate");
    // Without echo, as programs that query do, so the shim's answer to a query is not
    // printed back.
    let script = format!(
        "stty -echo; echo ready-$((1+1)); while [ ! -e '{}' ]; do sleep 0.02; done; \
         printf '{attack}'; echo clean-$((40+2))",
        gate.display()
    );
    let id = g
        .ok(&["spawn", "--tty", "--", "sh", "-c", &script])
        .trim()
        .to_string();
    let (mut master, mut attach) = attach_on_pty(g, &id, 30, 100);
    let mut seen = Vec::new();
    // Drawn by the shim once it holds the viewer's terminal (attach's own banner comes
    // before): from then on output goes to the viewer.
    read_pty_until(&mut master, &mut seen, "ready-2", WAIT);
    std::fs::write(&gate, "").expect("gate");
    read_pty_until(&mut master, &mut seen, "clean-42", WAIT);
    read_pty_until(&mut master, &mut seen, "succeeded", WAIT);
    assert!(attach.wait().expect("attach").success());
    (id, seen)
}

#[test]
fn what_an_agent_prints_cannot_act_on_the_viewers_terminal() {
    let g = Grove::new();
    // Each attack between two harmless words.
    let (id, seen) = viewed(
        &g,
        "one\\033]52;c;aWQgPiAvdG1wL3B3bmVkCg==\\007two\\033]52;c;?\\033\\\\three\
         \\033]0;pwned-title\\007four\\033[21tfive\\033P$qm\\033\\\\six\\033]10;?\\007seven\
         \\033]8;;http://evil.example/\\033\\\\link\\033]8;;\\033\\\\eight\
         \\033[1mbold\\033[0m\\n",
    );
    for (what, bytes) in [
        ("a clipboard access", &b"\x1b]52"[..]),
        ("a title", b"\x1b]0;"),
        ("a title's text", b"pwned-title"),
        ("a title report query", b"\x1b[21t"),
        ("a DECRQSS", b"\x1bP"),
        ("a colour query", b"\x1b]10"),
        ("a link", b"\x1b]8"),
        ("a link's address", b"evil.example"),
    ] {
        assert!(
            !contains(&seen, bytes),
            "{what} reached the viewer: {:?}",
            String::from_utf8_lossy(&seen)
        );
    }
    // The text and the drawing arrive, in order.
    assert!(
        contains(
            &seen,
            b"onetwothreefourfivesixsevenlinkeight\x1b[1mbold\x1b[0m"
        ),
        "{:?}",
        String::from_utf8_lossy(&seen)
    );
    // The log keeps everything the agent wrote: it is no terminal.
    let log = g.succeeded_log(&id);
    assert!(log.contains("\x1b]52;c;?"), "{log:?}");
}

#[test]
fn links_and_the_title_reach_the_viewer_only_when_opted_in() {
    let g = Grove::new();
    g.write_config("attach_links = true\nattach_title = true\n");
    let (_, seen) = viewed(
        &g,
        "\\033]8;;http://ok.example/\\033\\\\link\\033]8;;\\033\\\\\
         \\033]2;my-title\\007\\033]52;c;?\\007",
    );
    let shown = String::from_utf8_lossy(&seen);
    assert!(
        contains(&seen, b"\x1b]8;;http://ok.example/\x1b\\link\x1b]8;;\x1b\\"),
        "{shown:?}"
    );
    assert!(contains(&seen, b"\x1b]2;my-title\x07"), "{shown:?}");
    assert!(!contains(&seen, b"\x1b]52"), "{shown:?}");
    assert!(
        g.ok(&["config"]).contains("attach_links"),
        "grove config does not show attach_links"
    );
}

#[test]
fn the_shim_answers_cursor_position_and_device_attributes_with_nobody_attached() {
    let g = Grove::new();
    // Raw, so the answers are read as they come; made visible before they are printed.
    let script = "stty raw -echo; printf '\\033[2J\\033[3;5H\\033[6n'; \
        cpr=$(dd bs=1 count=6 2>/dev/null); printf '\\033[c'; \
        da=$(dd bs=1 count=9 2>/dev/null); stty sane; \
        printf '\\nanswers:%s|%s\\n' \"$cpr\" \"$da\" | tr '\\033' 'E'";
    let id = g
        // Unanswered, it would wait for ever: the timeout turns that into a failure.
        .ok(&[
            "spawn",
            "--tty",
            "--timeout",
            "20s",
            "--",
            "sh",
            "-c",
            script,
        ])
        .trim()
        .to_string();
    g.wait(&id);
    let log = g.ok(&["logs", &id]);
    assert!(
        log.contains("answers:E[3;5R|E[?62;22c"),
        "the agent did not get the answers: {log:?}"
    );
}
/// A repository whose `.grove.toml` hides a command behind a carriage return and an
/// escape sequence that would erase the line on a terminal.
fn hiding_grove_toml(g: &Grove) {
    std::fs::write(
        g.repo.join(".grove.toml"),
        "[worktree]\nsetup = [\"id > /tmp/grove-owned\\r\\u001b[2K$ npm ci\"]\n",
    )
    .expect("write");
}

#[test]
fn trust_shows_commands_escaped_and_approves_only_what_it_showed() {
    let g = Grove::new();
    hiding_grove_toml(&g);
    let shown = g.ok(&["trust", "--repo", g.repo.to_str().expect("utf-8")]);
    assert!(
        shown.contains("id > /tmp/grove-owned\\r\\e[2K$ npm ci"),
        "{shown:?}"
    );
    assert!(
        !shown.contains('\x1b') && !shown.contains('\r'),
        "{shown:?}"
    );
    let approved = g.json(&["trust", "--json", "--repo", g.repo.to_str().expect("utf-8")]);
    let sha256 = approved["sha256"].as_str().expect("sha256").to_string();
    assert_eq!(sha256.len(), 64, "{approved}");

    // A client that shows one content and approves another is refused, and the
    // approval stays as it was.
    std::fs::write(
        g.repo.join(".grove.toml"),
        "[worktree]\nsetup = [\"echo changed\"]\n",
    )
    .expect("write");
    let mut client = support::client(&g);
    let refused = support::call(
        &mut client,
        "repo.trust",
        serde_json::json!({"repo": g.repo, "sha256": sha256}),
    )
    .expect_err("a stale hash is refused");
    assert_eq!(refused.code, grove_proto::codes::CHANGED, "{refused:?}");
    assert!(refused.message.contains("changed since"), "{refused:?}");
    g.run(&["spawn", "--", "true"])
        .assert_exit(4, &["has changed since you approved it"]);
}

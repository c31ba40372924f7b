//! Worktree setup from `.grove.toml` `[worktree]` and `.worktreeinclude`.

mod support;

use std::fs;
use support::*;

fn configure(g: &Grove, grove_toml: &str) {
    fs::write(g.repo.join(".grove.toml"), grove_toml).expect("write");
    fs::write(
        g.repo.join(".gitignore"),
        "*.ignored\n.env\nnode_modules/\nnode_modules\n*.local\n",
    )
    .expect("write");
    g.git(&["add", ".grove.toml", ".gitignore"]);
    g.git(&["commit", "-qm", "grove config"]);
}

/// A grove whose repository commits `grove_toml` (see `configure`), trusted by the user.
fn trusted_grove(grove_toml: &str) -> Grove {
    let g = Grove::new();
    configure(&g, grove_toml);
    g.ok(&["trust"]);
    g
}

#[test]
fn copy_symlink_include_and_setup_commands_prepare_the_worktree_and_are_never_salvaged() {
    let g = trusted_grove(
        "[worktree]\ncopy = [\".env\", \"missing.txt\"]\nsymlink = [\"node_modules\"]\nsetup = [\"echo setting up; cat .env > seen-by-setup.txt\"]\n",
    );
    fs::write(g.repo.join(".env"), "SECRET=1\n").expect("env");
    fs::create_dir_all(g.repo.join("node_modules/left-pad")).expect("mkdir");
    fs::write(g.repo.join("node_modules/left-pad/index.js"), "pad\n").expect("write");
    fs::create_dir_all(g.repo.join("config")).expect("mkdir");
    fs::write(g.repo.join("config/db.local"), "local db\n").expect("write");
    fs::write(g.repo.join("config/other.ignored"), "not included\n").expect("write");
    fs::write(g.repo.join(".worktreeinclude"), "config/*.local\n").expect("write");

    let id = g.spawn(
        &[],
        "cat .env > env-copy.txt; cat node_modules/left-pad/index.js > pad.txt; \
         cat config/db.local > local.txt; test -L node_modules && echo linked > link.txt; \
         test -e config/other.ignored || echo absent > other.txt",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{}", g.ok(&["logs", &id]));
    let branch = format!("grove/{id}");
    assert_eq!(g.file_at(&branch, "env-copy.txt"), "SECRET=1\n");
    assert_eq!(g.file_at(&branch, "pad.txt"), "pad\n");
    assert_eq!(g.file_at(&branch, "local.txt"), "local db\n");
    assert_eq!(g.file_at(&branch, "link.txt"), "linked\n");
    assert_eq!(g.file_at(&branch, "other.txt"), "absent\n");
    assert_eq!(g.file_at(&branch, "seen-by-setup.txt"), "SECRET=1\n");
    let files = g.git(&["ls-tree", "-r", "--name-only", &branch]);
    for never in [".env", "node_modules", "config/db.local"] {
        assert!(
            !files.lines().any(|f| f.starts_with(never)),
            "{never} was salvaged: {files}"
        );
    }
    let log = g.ok(&["logs", &id]);
    assert!(log.contains("grove: setup: $ echo setting up"), "{log}");
    assert!(log.contains("setting up"), "{log}");
    assert!(
        log.contains("missing.txt is not in the main checkout"),
        "{log}"
    );
    // The shared link points at the main checkout, not a copy.
    assert!(g.repo.join("node_modules/left-pad/index.js").exists());
}

#[test]
fn a_failing_setup_command_fails_the_spawn_with_its_output_and_leaves_nothing() {
    let g = trusted_grove(
        "[worktree]\nsetup = [\"echo preparing; echo broken dependency >&2; exit 3\"]\n",
    );
    g.refused_all(
        &["spawn", "--", "true"],
        &[
            "setup command `echo preparing; echo broken dependency >&2; exit 3` failed",
            "broken dependency",
        ],
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
    assert_eq!(g.git_worktree_count(), 1);
}

#[test]
fn bad_worktree_config_is_refused_with_the_file() {
    let g = Grove::new();
    configure(&g, "[worktree]\ncopy = [\"../outside\"]\n");
    g.refused(
        &["spawn", "--", "true"],
        ".grove.toml: [worktree] path `../outside`",
    );
    configure(&g, "[worktree]\ncopies = [\"x\"]\n");
    g.refused(&["spawn", "--", "true"], "unknown field `copies`");
}

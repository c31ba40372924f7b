//! What grove runs on an agent's behalf at spawn stays in the agent's jail (issue 14,
//! items 3, 6 and 7): a jailed agent spawns only in its own repository, setup commands
//! run only from an approved `.grove.toml` and, for a jailed agent, in its jail; no
//! hook runs on worktree creation; copies never go through a committed symlink.
//! Each test is an attacking agent that tries and fails.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use support::*;

/// Commits `.grove.toml` (and a `.gitignore` for what setup places) on `main`.
fn configure(g: &Grove, grove_toml: &str) {
    fs::write(g.repo.join(".grove.toml"), grove_toml).expect("write");
    fs::write(g.repo.join(".gitignore"), ".env\nconf/\ncfg/\n").expect("write");
    g.git(&["add", ".grove.toml", ".gitignore"]);
    g.git(&["commit", "-qm", "grove config"]);
}

fn env_args(vars: &[(&str, &Path)]) -> Vec<String> {
    let mut args = vec!["--env".to_string(), format!("GROVE_BIN={BIN}")];
    for (name, value) in vars {
        args.push("--env".into());
        args.push(format!("{name}={}", value.display()));
    }
    args
}

/// Spawns a jailed `script`, waits for it, and returns its id and log.
fn run_jailed(g: &Grove, vars: &[(&str, &Path)], script: &str) -> (String, String) {
    let env = env_args(vars);
    let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
    args.push("--jail");
    let id = g.spawn(&args, script);
    let log = g.succeeded_log(&id);
    (id, log)
}

/// The user approves `sh ./setup.sh` (holding `approved`); a jailed agent then commits
/// its own setup.sh (`attack`, then a line recording whose environment ran it) and
/// spawns a child: the child's base is the agent's HEAD, so the daemon runs the agent's
/// script for the child. Returns the child's id.
fn child_runs_agents_setup(
    g: &Grove,
    approved: &str,
    vars: &[(&str, &Path)],
    attack: &str,
) -> String {
    configure(g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), approved).expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    let script = format!(
        r#"
        cat > setup.sh <<EOF
{attack}
echo "\$GROVE_AGENT_ID" > setup-ran.txt
EOF
        git add setup.sh && git commit -qm 'my setup' || exit 1
        child=$("$GROVE_BIN" spawn -- true) || exit 1
        "$GROVE_BIN" wait "$child" > /dev/null
        echo "child=$child"
    "#
    );
    let (_, log) = run_jailed(g, vars, &script);
    log.lines()
        .find_map(|l| l.strip_prefix("child="))
        .unwrap_or_else(|| panic!("no child: {log}"))
        .trim()
        .to_string()
}

fn grove_branches(repo: &Path) -> String {
    git_in(repo, &["branch", "--list", "grove/*"])
}

fn hook(repo: &Path, name: &str, marker: &Path) {
    let hooks = repo.join(".git/hooks");
    fs::create_dir_all(&hooks).expect("mkdir");
    let path = hooks.join(name);
    fs::write(
        &path,
        format!("#!/bin/sh\necho hooked >> '{}'\n", marker.display()),
    )
    .expect("write hook");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn a_jailed_agent_cannot_spawn_in_another_repository() {
    let g = Grove::new();
    let other = g.dir.path().join("other");
    init_repo(&other);
    let marker = g.dir.path().join("marker");
    fs::write(
        other.join(".grove.toml"),
        format!(
            "[worktree]\nsetup = [\"echo setup >> '{}'\"]\n",
            marker.display()
        ),
    )
    .expect("write");
    hook(&other, "post-checkout", &marker);
    let (id, log) = run_jailed(
        &g,
        &[("OTHER", &other)],
        r#""$GROVE_BIN" spawn --repo "$OTHER" -- true; echo "exit=$?""#,
    );
    assert!(log.contains("exit=4"), "{log}");
    assert!(
        log.contains(&format!(
            "agent {id} is jailed and may spawn only in its own repository"
        )),
        "{log}"
    );
    assert_eq!(grove_branches(&other), "");
    assert_eq!(
        git_in(&other, &["worktree", "list"]).lines().count(),
        1,
        "a worktree was created in the other repository"
    );
    assert!(
        !marker.exists(),
        "setup or a hook ran in the other repository"
    );
    assert_eq!(g.all_agents().len(), 1);
}

#[test]
fn setup_commands_of_a_jailed_agents_child_run_in_the_jail() {
    let g = Grove::new();
    // The user's objects, which the jail's view shows read-only (its repository
    // borrows them); a path that is not in the view at all may land in the jail's
    // private home, which is not outside.
    let outside = g.repo.join(".git/objects/outside.txt");
    let child = child_runs_agents_setup(
        &g,
        "echo benign > setup-ran.txt\n",
        &[("OUTSIDE", &outside)],
        "echo pwned > '$OUTSIDE' && echo outside-written",
    );
    assert!(
        !outside.exists(),
        "the setup command wrote outside the jail"
    );
    let child_log = g.ok(&["logs", &child]);
    assert!(!child_log.contains("outside-written"), "{child_log}");
    assert!(
        child_log.contains("grove: setup: $ sh ./setup.sh"),
        "{child_log}"
    );
    // It did run, with the child's environment, not the daemon's.
    assert_eq!(g.agent_file(&child, "setup-ran.txt"), format!("{child}\n"));
}

/// The user's own unjailed spawn on a jailed agent's branch: the agent's setup.sh runs
/// for it, jailed, as no branch of the user's reaches it; the same script on the
/// user's own branch is the control that shows the attack works unjailed.
#[test]
fn setup_on_a_jailed_agents_branch_runs_jailed_even_for_an_unjailed_spawn() {
    let g = Grove::new();
    configure(&g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), "echo benign > setup-ran.txt\n").expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    // The user's git dir, which this setup's view shows read-only (for git).
    let outside = g.repo.join(".git/objects/outside.txt");
    let attack = format!(
        "echo pwned > '{}' && echo outside-written\necho ran > setup-ran.txt\n",
        outside.display()
    );
    let script = format!(
        "cat > setup.sh <<'EOF'\n{attack}EOF\ngit add setup.sh && git commit -qm 'my setup'"
    );
    let (agent, _) = run_jailed(&g, &[], &script);
    let branch = format!("grove/{agent}");
    assert!(grove_branches(&g.repo).contains(&branch));

    let id = g.spawn(&["--base", &branch], "cat setup-ran.txt");
    let log = g.succeeded_log(&id);
    assert!(
        !outside.exists(),
        "the agent's setup.sh wrote outside its worktree"
    );
    assert!(!log.contains("outside-written"), "{log}");
    assert_holds_all(
        &log,
        &["is on no branch or tag of yours", "run jailed", "ran"],
    );

    // Merged into a branch of the user's, it is the user's content: it runs unjailed.
    g.git(&["merge", "-q", "--ff-only", &branch]);
    let id = g.spawn(&[], "cat setup-ran.txt");
    let log = g.succeeded_log(&id);
    assert!(outside.exists(), "the control did not write: {log}");
    assert!(!log.contains("run jailed"), "{log}");
}

/// Jailed, a setup command keeps its environment, output and exit status, and one
/// that fails rolls the spawn back as unjailed.
#[test]
fn a_failing_jailed_setup_command_fails_the_spawn_with_its_output() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    configure(&g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), "true\n").expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    let script = "printf 'echo \"preparing for $%s\"; echo broken >&2; exit 3\\n' \
                  GROVE_AGENT_ID > setup.sh && git commit -qam 'my setup'";
    let (agent, _) = run_jailed(&g, &[], script);
    let branches = grove_branches(&g.repo);
    let worktrees = g.git_worktree_count();

    let out = g.run(&["spawn", "--base", &format!("grove/{agent}"), "--", "true"]);
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert_holds_all(
        &out.stderr,
        &[
            "setup command `sh ./setup.sh` failed (exit status: 3)",
            "preparing for ",
            "broken",
        ],
    );
    assert!(!out.stderr.contains("preparing for \n"), "{}", out.stderr);
    assert_eq!(grove_branches(&g.repo), branches);
    assert_eq!(g.git_worktree_count(), worktrees);
    assert_eq!(g.all_agents().len(), 1);
}

/// The user's repository borrows its objects (`git clone --shared`): jailed setup on
/// agents' content and jailed agents see them too, read-only, so git reads every file
/// of the base.
#[test]
fn jailed_setup_in_a_repository_that_borrows_its_objects_can_read_them() {
    if !have_landlock() {
        return;
    }
    let g = Grove::without_repo();
    let origin = g.dir.path().join("origin");
    init_repo(&origin);
    git_in(g.dir.path(), &["clone", "-q", "--shared", "origin", "repo"]);
    let borrowed = origin.join(".git/objects");
    configure(&g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), "true\n").expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    let script = format!(
        "printf 'git cat-file -p HEAD:README.md; git status --porcelain >/dev/null && echo \
         status-ok; touch {}/planted && echo wrote; true\\n' > setup.sh && git commit -qam 'my setup'",
        borrowed.display()
    );
    let agent = g.spawn(&["--no-jail"], &script);
    g.succeeded_log(&agent);

    let branch = format!("grove/{agent}");
    let id = g.spawn(&["--base", &branch], "true");
    let log = g.succeeded_log(&id);
    assert_holds_all(&log, &["run jailed", "# test repo", "status-ok"]);
    assert!(!log.contains("wrote"), "{log}");
    assert!(!borrowed.join("planted").exists());
    // A jailed agent there reads them through its own repository's alternates.
    let (_, log) = run_jailed(&g, &[], "git cat-file -p HEAD:README.md");
    assert!(log.contains("# test repo"), "{log}");
    // The control: merged, it runs as the user, who can write there.
    g.git(&["merge", "-q", "--ff-only", &branch]);
    let log = g.succeeded_log(&g.spawn(&[], "true"));
    assert!(
        log.contains("wrote") && borrowed.join("planted").exists(),
        "{log}"
    );
}

/// `grove` copied on its own, without its shim binary, runs jailed setup itself
/// (`grove __shim setup`), in the same view.
#[test]
fn without_the_shim_binary_jailed_setup_still_runs_in_its_view() {
    if !have_landlock() {
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("temp dir");
    let alone = dir.path().join("grove-e2e");
    fs::copy(BIN, &alone).expect("copy grove");
    let g = Grove::new().with_bin(&alone);
    configure(&g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), "true\n").expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    fs::write(g.dir.path().join("in-home"), "").expect("write");
    let script = "printf '[ -e \"$HOME/in-home\" ] && echo seen-home; echo \"pid:$$\"\\n' \
                  > setup.sh && git commit -qam 'my setup'";
    let agent = g.spawn(&["--no-jail"], script);
    g.succeeded_log(&agent);
    let branch = format!("grove/{agent}");

    let id = g.spawn(&["--base", &branch], "true");
    let log = g.succeeded_log(&id);
    // Its own pid namespace (grove's init, `sh -c`, then setup.sh's shell) and a
    // private $HOME.
    assert_holds_all(&log, &["run jailed", "pid:3\n"]);
    assert!(!log.contains("seen-home"), "{log}");
    assert!(g
        .daemon_log()
        .contains("no shim binary next to the grove executable"));
    // The control: the user's own content runs as the user.
    g.git(&["merge", "-q", "--ff-only", &branch]);
    let log = g.succeeded_log(&g.spawn(&[], "true"));
    assert!(
        log.contains("seen-home") && !log.contains("pid:3\n"),
        "{log}"
    );
}

/// Where the jail setup on agents' content needs cannot be had (here: a kernel without
/// the Landlock ABI), the spawn is refused with the reason, never run unjailed.
#[test]
fn setup_on_agents_content_is_refused_where_no_jail_can_be_had() {
    let g = Grove::new().with_env(&[("GROVE_TEST_LANDLOCK_ABI", "5")]);
    configure(&g, "[worktree]\nsetup = [\"sh ./setup.sh\"]\n");
    fs::write(g.repo.join("setup.sh"), "true\n").expect("write");
    g.git(&["add", "setup.sh"]);
    g.git(&["commit", "-qm", "setup script"]);
    g.ok(&["trust"]);
    let ran = g.files().join("ran-unjailed");
    let script = format!(
        "echo 'echo ran > {}' > setup.sh && git commit -qam 'my setup'",
        ran.display()
    );
    let agent = g.spawn(&["--no-jail"], &script);
    g.succeeded_log(&agent);
    let branches = grove_branches(&g.repo);

    let out = g.run(&["spawn", "--base", &format!("grove/{agent}"), "--", "true"]);
    assert_eq!(out.code, 4, "{} {}", out.stdout, out.stderr);
    assert_holds_all(
        &out.stderr,
        &[
            "setup commands on agents' content",
            "run in a jail",
            "Landlock ABI 6",
            "nothing was run",
        ],
    );
    assert!(!ran.exists(), "the agent's setup.sh ran unjailed");
    assert_eq!(grove_branches(&g.repo), branches);
    assert_eq!(g.all_agents().len(), 1);
}

#[test]
fn no_hook_runs_when_a_worktree_is_created() {
    let g = Grove::new();
    let marker = g.dir.path().join("marker");
    for name in ["post-checkout", "post-index-change"] {
        hook(&g.repo, name, &marker);
    }
    let (_, log) = run_jailed(
        &g,
        &[],
        r#"echo x > x.txt && git add x.txt && git commit -qm x; child=$("$GROVE_BIN" spawn -- true) && "$GROVE_BIN" wait "$child" > /dev/null && echo spawned"#,
    );
    assert!(log.contains("spawned"), "{log}");
    assert!(
        !marker.exists(),
        "a hook ran: {}",
        fs::read_to_string(&marker).unwrap_or_default()
    );
    // The hooks are real: git itself runs them.
    git_in(&g.repo, &["checkout", "-q", "-b", "probe"]);
    assert!(marker.exists(), "the test hook does not work");
}

#[test]
fn a_copy_through_a_committed_symlink_is_refused_and_writes_nothing_outside() {
    let g = Grove::new();
    configure(&g, "[worktree]\ncopy = [\".env\", \"conf/x\", \"cfg\"]\n");
    fs::write(g.repo.join(".env"), "SECRET=1\n").expect("write");
    for dir in ["conf", "cfg"] {
        fs::create_dir_all(g.repo.join(dir)).expect("mkdir");
        fs::write(g.repo.join(dir).join("x"), "config\n").expect("write");
    }
    let victim = g.write_file("bashrc", "user's own\n");
    let elsewhere = g.make_dir("elsewhere");

    // `.env` itself a link to a file outside.
    let (_, log) = run_jailed(
        &g,
        &[("VICTIM", &victim)],
        r#"rm -f .env && ln -s "$VICTIM" .env && git add -f .env && git commit -qm link || exit 1
           "$GROVE_BIN" spawn -- true; echo "exit=$?""#,
    );
    assert!(log.contains("exit=4"), "{log}");
    assert!(
        log.contains("[worktree] `.env`: `.env` in the new worktree is a symbolic link"),
        "{log}"
    );
    assert_eq!(fs::read_to_string(&victim).expect("read"), "user's own\n");

    // A parent component `conf` linked to a directory outside.
    let (_, log) = run_jailed(
        &g,
        &[("ELSEWHERE", &elsewhere)],
        r#"rm -rf conf && ln -s "$ELSEWHERE" conf && git add -f conf && git commit -qm link || exit 1
           "$GROVE_BIN" spawn -- true; echo "exit=$?""#,
    );
    assert!(log.contains("exit=4"), "{log}");
    assert!(
        log.contains("[worktree] `conf/x`: `conf` in the new worktree is a symbolic link"),
        "{log}"
    );
    assert!(
        !elsewhere.join("x").exists(),
        "the copy went through the link"
    );

    // A link inside a copied directory.
    let (_, log) = run_jailed(
        &g,
        &[("VICTIM", &victim)],
        r#"rm -f cfg/x && ln -s "$VICTIM" cfg/x && git add -f cfg && git commit -qm link || exit 1
           "$GROVE_BIN" spawn -- true; echo "exit=$?""#,
    );
    assert!(log.contains("exit=4"), "{log}");
    assert!(
        log.contains("[worktree] `cfg/x`: `cfg/x` in the new worktree is a symbolic link"),
        "{log}"
    );
    assert_eq!(fs::read_to_string(&victim).expect("read"), "user's own\n");
    // Only the attackers exist: the refused children left nothing.
    assert_eq!(g.all_agents().len(), 3);
    assert_eq!(grove_branches(&g.repo).lines().count(), 3);
    assert_eq!(
        g.worktree_dirs().len(),
        0,
        "{:?}\n{}",
        g.worktree_dirs(),
        g.ok(&["--json", "list", "--all"])
    );
}

#[test]
fn setup_commands_run_only_after_the_user_approved_that_exact_file() {
    let g = Grove::new();
    let toml = "[worktree]\nsetup = [\"echo ran > setup-ran.txt\"]\n";
    configure(&g, toml);
    g.run(&["spawn", "--", "true"]).assert_exit(
        4,
        &[
            ".grove.toml has setup commands you have not approved",
            "$ echo ran > setup-ran.txt",
            "run `grove trust` in ",
            "Nothing was created",
        ],
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(grove_branches(&g.repo), "");

    let approved = g.ok(&["trust"]);
    assert!(
        approved.contains("$ echo ran > setup-ran.txt"),
        "{approved}"
    );
    let id = g.spawn(&[], "cat setup-ran.txt");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert!(g.ok(&["logs", &id]).contains("ran"));

    // A changed file needs approval again, even uncommitted.
    fs::write(
        g.repo.join(".grove.toml"),
        format!("{toml}# one more line\n"),
    )
    .expect("write");
    let refused = g.run(&["spawn", "--", "true"]);
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("has changed since you approved it"),
        "{}",
        refused.stderr
    );
    g.ok(&["trust"]);
    let id = g.spawn(&[], "true");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");

    // Revoked: refused again.
    assert!(g.ok(&["trust", "--revoke"]).contains("approval withdrawn"));
    assert_eq!(g.run(&["spawn", "--", "true"]).code, 4);
}

#[test]
fn copy_and_symlink_entries_need_no_approval() {
    let g = Grove::new();
    configure(&g, "[worktree]\ncopy = [\".env\"]\n");
    fs::write(g.repo.join(".env"), "SECRET=1\n").expect("write");
    let id = g.spawn(&[], "cat .env");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
    assert!(g.ok(&["logs", &id]).contains("SECRET=1"));
}

#[test]
fn an_agent_cannot_approve_setup_commands() {
    let g = Grove::new();
    let marker: PathBuf = g.dir.path().join("marker");
    // A repository whose setup the user has not approved (the agent's own needs none,
    // or the agent would not start).
    let other = g.dir.path().join("other");
    init_repo(&other);
    fs::write(
        other.join(".grove.toml"),
        format!(
            "[worktree]\nsetup = [\"echo ran >> '{}'\"]\n",
            marker.display()
        ),
    )
    .expect("write");
    for jail in [&["--jail"][..], &[][..]] {
        let env = env_args(&[("OTHER", &other)]);
        let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
        args.extend_from_slice(jail);
        let id = g.spawn(
            &args,
            r#""$GROVE_BIN" trust --repo "$OTHER"; echo "trust-exit=$?"
               "$GROVE_BIN" trust --repo "$OTHER" --revoke; echo "revoke-exit=$?""#,
        );
        g.wait(&id);
        let log = g.ok(&["logs", &id]);
        assert!(log.contains("trust-exit=4"), "{log}");
        assert!(log.contains("revoke-exit=4"), "{log}");
        assert!(
            log.contains(&format!(
                "agent {id} may not approve a repository's .grove.toml"
            )),
            "{log}"
        );
    }
    let out = g.run(&[
        "spawn",
        "--repo",
        other.to_str().expect("utf-8"),
        "--",
        "true",
    ]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(
        out.stderr.contains("you have not approved"),
        "{}",
        out.stderr
    );
    assert!(!marker.exists());
}

#[test]
fn trust_outside_a_repository_or_without_a_file_says_so() {
    let g = Grove::new();
    g.refused(&["trust"], ".grove.toml does not exist");
    let nowhere = g.make_dir("nowhere");
    g.refused(
        &["trust", "--repo", nowhere.to_str().expect("utf-8")],
        "is not inside a git repository",
    );
    configure(&g, "[worktree]\ncopies = [\"x\"]\n");
    g.refused(&["trust"], "unknown field `copies`");
}

#[test]
fn a_jailed_agents_setup_command_cannot_reach_the_daemon_as_the_user() {
    let g = Grove::new();
    let escape = g.dir.path().join("escape.txt");
    // The setup command is the daemon's child, not the agent's: were it to connect, it
    // would not be known as any agent. It tries an unjailed spawn and an approval.
    let child = child_runs_agents_setup(
        &g,
        "true\n",
        &[("ESCAPE", &escape)],
        r#"'$GROVE_BIN' spawn --no-jail -- sh -c "echo out > '$ESCAPE'" && echo spawned-as-user
'$GROVE_BIN' trust --revoke && echo trusted-as-user"#,
    );
    let child_log = g.ok(&["logs", &child]);
    assert!(!child_log.contains("spawned-as-user"), "{child_log}");
    assert!(!child_log.contains("trusted-as-user"), "{child_log}");
    assert_eq!(
        g.agent_file(&child, "setup-ran.txt"),
        format!("{child}\n"),
        "{child_log}"
    );
    // Only the attacker and its child: no agent was started by the setup command.
    assert_eq!(g.all_agents().len(), 2);
    assert!(!escape.exists(), "an unjailed agent wrote outside");
    // The approval still stands.
    let id = g.spawn(&[], "true");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
}

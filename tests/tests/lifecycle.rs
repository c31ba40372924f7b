//! An agent's life through the real binary: spawn, run, collect, and what git sees after.

mod support;

use std::fs;
use std::time::Duration;
use support::*;

#[test]
fn spawn_run_collect_puts_the_agents_work_on_its_branch() {
    let g = Grove::new();
    let id = g.spawn(
        &["--name", "feature"],
        "echo 'agent says hi'; echo four >> src/lib.txt; git commit -qam 'agent commit'; \
         echo five >> src/lib.txt; echo new > untracked.txt; echo junk > x.ignored",
    );
    let record = g.wait(&id);
    assert_eq!(record["status"], "collected");
    assert_eq!(record["outcome"], "succeeded");
    assert_eq!(record["exit_code"], 0);
    let branch = format!("grove/feature-{id}");
    assert_eq!(record["branch"], branch.as_str());
    assert_eq!(record["branch_exists"], true);
    assert_eq!(record["salvaged"], true);
    assert_eq!(record["files_changed"], 2);
    assert_eq!(record["insertions"], 3);
    assert_eq!(record["deletions"], 0);

    // The branch holds the agent's own commit, then grove's salvage of the leftovers.
    let log = g.git(&["log", "--format=%s", &format!("main..{branch}")]);
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(subjects.len(), 2, "{log}");
    assert_eq!(subjects[0], "feature: work left at exit");
    assert_eq!(subjects[1], "agent commit");
    assert_eq!(
        g.file_at(&branch, "src/lib.txt"),
        "one\ntwo\nthree\nfour\nfive\n"
    );
    assert_eq!(g.file_at(&branch, "untracked.txt"), "new\n");
    // Ignored files are not work.
    assert!(g
        .git(&["ls-tree", "-r", "--name-only", &branch])
        .lines()
        .all(|f| f != "x.ignored"));
    assert_eq!(
        record["head_commit"].as_str(),
        Some(g.git(&["rev-parse", &branch]).trim())
    );

    // The worktree is gone, as far as the disk and git know.
    g.assert_no_worktree_left();
    // Reviewable with plain git.
    let diff = g.git(&["diff", &format!("main...{branch}")]);
    assert!(diff.contains("+four") && diff.contains("+new"), "{diff}");
    assert!(g.ok(&["logs", &id]).contains("agent says hi"));
    let diff_out = g.ok(&["diff", &id]);
    assert!(diff_out.contains("+five"), "{diff_out}");
}

#[test]
fn clean_run_leaves_no_branch_and_no_worktree() {
    let g = Grove::new();
    let id = g.spawn(&[], "echo nothing to do");
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded");
    assert_eq!(record["branch_exists"], false);
    assert_eq!(record["files_changed"], 0);
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(g.git_worktree_count(), 1);
    // Not live any more, but still listed with --all.
    assert_eq!(
        g.json(&["list"])["agents"].as_array().map(Vec::len),
        Some(0)
    );
    assert_eq!(g.json(&["list", "--all"])["agents"][0]["id"], id.as_str());
}

#[test]
fn five_agents_in_parallel_edit_the_same_file_each_on_its_own_branch() {
    let g = Grove::new();
    let ids: Vec<String> = (0..5)
        .map(|i| g.spawn(&[], &format!("echo agent-{i} >> src/lib.txt; sleep 0.2")))
        .collect();
    let mut args = vec!["wait"];
    args.extend(ids.iter().map(String::as_str));
    let done = g.json(&args);
    let agents = done["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 5);
    for (i, (agent, id)) in agents.iter().zip(&ids).enumerate() {
        assert_eq!(agent["id"], id.as_str());
        assert_eq!(agent["outcome"], "succeeded");
        let content = g.agent_file(id, "src/lib.txt");
        assert_eq!(
            content,
            format!("one\ntwo\nthree\nagent-{i}\n"),
            "agent {id}"
        );
    }
    assert_eq!(g.git(&["show", "main:src/lib.txt"]), "one\ntwo\nthree\n");
    assert!(g.worktree_dirs().is_empty());
    g.git(&["fsck", "--strict"]);
}

#[test]
fn running_agent_worktree_is_locked_and_known_to_git() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "", "");
    let record = g.record(&id);
    assert_eq!(record["status"], "running");
    let worktree = record["worktree"].as_str().expect("worktree").to_string();
    let porcelain = g.git(&["worktree", "list", "--porcelain"]);
    assert_holds_all(
        &porcelain,
        &[
            &format!("worktree {worktree}"),
            &format!("locked grove agent {id} is using this worktree"),
        ],
    );
    assert_eq!(
        git_in(std::path::Path::new(&worktree), &["status", "--porcelain"]),
        ""
    );
    // `grove list` agrees with git.
    let listed = g.json(&["list"]);
    assert_eq!(listed["agents"][0]["worktree"], worktree.as_str());
    fs::write(&gate, "").expect("open gate");
    assert_eq!(g.wait(&id)["outcome"], "succeeded");
}

#[test]
fn kill_stops_the_whole_tree_including_background_and_escaped_grandchildren() {
    let g = Grove::new();
    let pids = g.make_dir("pids");
    let id = g.spawn(
        &["--env", &format!("PIDS={}", pids.display())],
        r#"sleep 300 & echo $! > "$PIDS/background"
           setsid sh -c 'sleep 300 & echo $! > "$PIDS/escaped"; wait' &
           (sh -c 'sleep 300 & echo $! > "$PIDS/orphan"' &)
           wait"#,
    );
    for name in ["background", "escaped", "orphan"] {
        let path = pids.join(name);
        eventually(name, Duration::from_secs(10), || {
            fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
        });
    }
    let victims: Vec<i32> = ["background", "escaped", "orphan"]
        .iter()
        .map(|n| read_pid(&pids.join(n)))
        .collect();
    assert!(victims.iter().all(|&p| process_exists(p)));
    let killed = g.json(&["kill", &id]);
    assert_eq!(killed["status"], "collected");
    assert_eq!(killed["outcome"], "killed");
    for pid in victims {
        assert!(!process_exists(pid), "pid {pid} survived the kill");
    }
    assert!(g.worktree_dirs().is_empty());
    // Its files are deleted right after the collect is reported.
    eventually(
        "the removed worktree's files deleted",
        Duration::from_secs(10),
        || {
            fs::read_dir(g.worktree_root())
                .into_iter()
                .flatten()
                .flatten()
                .all(|repo| fs::read_dir(repo.path()).is_ok_and(|mut d| d.next().is_none()))
        },
    );
    // Killing a finished agent is refused clearly.
    g.refused(&["kill", &id], "already finished");
}

#[test]
fn leftover_background_processes_die_when_the_command_ends() {
    let g = Grove::new();
    let pid_file = g.dir.path().join("bg.pid");
    let id = g.spawn(
        &[],
        &format!("sleep 300 & echo $! > '{}'", pid_file.display()),
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded");
    assert!(!process_exists(read_pid(&pid_file)));
}

#[test]
fn timeout_ends_the_agent_as_timed_out() {
    let g = Grove::new();
    let id = g.spawn(
        &["--timeout", "300ms"],
        "echo partial > partial.txt; sleep 60",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "timed_out");
    assert_eq!(record["status"], "collected");
    // What it wrote before the timeout is on its branch.
    assert_eq!(g.agent_file(&id, "partial.txt"), "partial\n");
    let out = g.run(&["wait", &id]);
    assert_eq!(out.code, 1, "a timed-out agent is not a success");
}

#[test]
fn failing_agent_is_collected_and_wait_says_so() {
    let g = Grove::new();
    let id = g.spawn(&[], "echo half > half.txt; exit 3");
    let out = g.run(&["wait", &id]);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("failed (exit 3)"), "{}", out.stdout);
    let record = g.record(&id);
    assert_eq!(record["exit_code"], 3);
    assert_eq!(record["branch_exists"], true);
}

#[test]
fn keep_leaves_the_worktree_in_place() {
    let g = Grove::new();
    let id = g.spawn(&["--keep"], "echo kept > kept.txt");
    let record = g.wait(&id);
    let worktree = record["worktree"].as_str().expect("worktree");
    assert_eq!(
        fs::read_to_string(format!("{worktree}/kept.txt"))
            .ok()
            .as_deref(),
        Some("kept\n")
    );
    assert_eq!(
        git_in(std::path::Path::new(worktree), &["status", "--porcelain"]),
        ""
    );
    assert_eq!(g.agent_file(&id, "kept.txt"), "kept\n");
}

#[test]
fn agent_sees_its_identity_and_user_env_but_values_are_not_recorded() {
    let g = Grove::new();
    let id = g.spawn(
        &["--env", "SECRET_TOKEN=hunter2", "--env", "MODE=fast"],
        "env | grep -E '^(GROVE_|SECRET_TOKEN|MODE)' | sort > env.txt; pwd > pwd.txt",
    );
    let record = g.wait(&id);
    let env = g.agent_file(&id, "env.txt");
    for expected in [
        format!("GROVE_AGENT_ID={id}"),
        format!("GROVE_SESSION={id}"),
        "SECRET_TOKEN=hunter2".into(),
        "MODE=fast".into(),
    ] {
        assert!(env.contains(&expected), "missing {expected} in {env}");
    }
    assert_holds_all(
        &env,
        &[
            "GROVE_SOCKET=",
            "GROVE_TOKEN=",
            "GROVE_WORKTREE=",
            "GROVE_BASE=",
        ],
    );
    assert_eq!(
        g.agent_file(&id, "pwd.txt").trim(),
        record["worktree"].as_str().expect("worktree")
    );
    assert_eq!(
        record["env_names"],
        serde_json::json!(["SECRET_TOKEN", "MODE"])
    );
    let shown = g.ok(&["show", &id]);
    assert!(!shown.contains("hunter2"));
    assert!(!g.ok(&["--json", "show", &id]).contains("hunter2"));
    let db = fs::read(g.home.join("grove.db")).expect("db");
    assert!(!String::from_utf8_lossy(&db).contains("hunter2"));
    assert!(!g.daemon_log().contains("hunter2"));
}

#[test]
fn logs_follow_streams_until_the_agent_ends() {
    let g = Grove::new();
    let (id, gate) = g.spawn_gated(&[], "echo first", "echo second");
    let follower = g
        .command()
        .args(["logs", "-f", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("logs -f");
    fs::write(&gate, "").expect("gate");
    let out = follower.wait_with_output().expect("follower output");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nsecond\n");
}

#[test]
fn json_output_of_every_command_parses() {
    let g = Grove::new();
    let spawned = g.json(&["spawn", "--", "sh", "-c", "echo x > x.txt"]);
    let id = spawned["id"].as_str().expect("id").to_string();
    assert_eq!(spawned["status"], "running");
    let waited = g.json(&["wait", &id]);
    assert_eq!(waited["agents"][0]["id"], id.as_str());
    assert_eq!(g.json(&["show", &id])["id"], id.as_str());
    assert!(g.json(&["list"])["agents"].is_array());
    assert!(g.json(&["list", "--all"])["agents"].is_array());
    assert_eq!(g.json(&["logs", &id])["id"], id.as_str());
    assert_eq!(g.json(&["daemon", "status"])["running"], true);
    let with_wait = g.json(&["spawn", "--wait", "--", "true"]);
    assert_eq!(with_wait["status"], "collected");
    assert_eq!(g.json(&["daemon", "stop"])["stopped"], true);
    let status = g.run(&["--json", "daemon", "status"]);
    assert_eq!(status.code, 3);
    let value: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(value["running"], false);
}

#[test]
fn ids_resolve_by_unique_prefix() {
    let g = Grove::new();
    let id = g.spawn(&[], "true");
    g.wait(&id);
    assert_eq!(g.json(&["show", &id[..3]])["id"], id.as_str());
    g.refused(&["show", "zz"], "no agent has an id starting with `zz`");
}

#[test]
fn sparse_spawn_checks_out_only_the_given_directories_and_loses_nothing_else() {
    let g = Grove::new();
    for dir in ["a", "b", "c/deep"] {
        fs::create_dir_all(g.repo.join(dir)).expect("mkdir");
        fs::write(g.repo.join(dir).join("file.txt"), format!("{dir}\n")).expect("write");
    }
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "dirs"]);
    let id = g.spawn(
        &["--sparse", "a", "c/deep"],
        "ls -d a b c/deep src 2> missing.txt > present.txt; echo more >> a/file.txt",
    );
    let record = g.wait(&id);
    assert_eq!(record["outcome"], "succeeded", "{}", g.ok(&["logs", &id]));
    assert_eq!(record["sparse"], serde_json::json!(["a", "c/deep"]));
    let branch = format!("grove/{id}");
    let present = g.file_at(&branch, "present.txt");
    assert_eq!(present, "a\nc/deep\n", "only the cone is checked out");
    assert!(g
        .git(&["show", &format!("{branch}:missing.txt")])
        .contains("b"));
    // What was not checked out is not deleted on the branch.
    assert_eq!(g.file_at(&branch, "b/file.txt"), "b\n");
    assert_eq!(g.file_at(&branch, "src/lib.txt"), "one\ntwo\nthree\n");
    assert_eq!(g.file_at(&branch, "a/file.txt"), "a\nmore\n");
    let changed = g.git(&["diff", "--name-only", &format!("main...{branch}")]);
    assert_eq!(
        changed
            .lines()
            .filter(|l| !l.ends_with(".txt") || l.starts_with("a/"))
            .count(),
        1,
        "{changed}"
    );
    g.refused(
        &["spawn", "--sparse", "../x", "--", "true"],
        "relative to the repository root",
    );
}

#[test]
fn long_lists_come_in_pages_and_the_cli_reads_them_all() {
    let g = Grove::new();
    let ids: Vec<String> = (0..5).map(|_| g.spawn(&[], "true")).collect();
    let mut args = vec!["wait"];
    args.extend(ids.iter().map(String::as_str));
    g.ok(&args);
    let mut c = client(&g);
    let mut seen = Vec::new();
    let mut after = serde_json::Value::Null;
    loop {
        let page = call(
            &mut c,
            "agent.list",
            serde_json::json!({"all": true, "limit": 2, "after": after}),
        )
        .expect("page");
        let agents = page["agents"].as_array().expect("agents");
        assert!(agents.len() <= 2);
        seen.extend(
            agents
                .iter()
                .map(|a| a["id"].as_str().expect("id").to_string()),
        );
        if page["next"].is_null() {
            break;
        }
        after = page["next"].clone();
    }
    assert_eq!(seen, ids);
    let all = g.json(&["list", "--all"]);
    assert_eq!(all["agents"].as_array().map(Vec::len), Some(5));
    let bad = call(
        &mut c,
        "agent.list",
        serde_json::json!({"all": true, "after": "nope"}),
    );
    assert!(bad
        .expect_err("unknown cursor")
        .message
        .contains("start again"));
}

/// Issue 30, item 8: `grove kill` takes several ids and waits for them all.
#[test]
fn kill_stops_every_agent_named() {
    let g = Grove::new();
    let ids: Vec<String> = (0..3).map(|_| g.spawn(&[], "sleep 30")).collect();
    let args: Vec<&str> = std::iter::once("--json")
        .chain(std::iter::once("kill"))
        .chain(ids.iter().map(String::as_str))
        .collect();
    let killed: serde_json::Value = serde_json::from_str(&g.ok(&args)).expect("json");
    let agents = killed["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 3, "{killed}");
    for agent in agents {
        assert_eq!(agent["status"], "collected", "{agent}");
        assert_eq!(agent["outcome"], "killed", "{agent}");
    }
}

/// Issue 30, item 1: `grove wait --timeout` gives up, says so, and exits 1; a wait
/// that arrives in time exits 0.
#[test]
fn wait_gives_up_after_its_timeout() {
    let g = Grove::new();
    let slow = g.spawn(&[], "sleep 30");
    let out = g.run(&["--json", "wait", "--timeout", "1s", &slow]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("gave up after 1s"), "{}", out.stderr);
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(list["agents"][0]["status"], "running", "{list}");
    let quick = g.spawn(&[], "true");
    let out = g.run(&["wait", "--timeout", "60s", &quick]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    g.ok(&["kill", &slow]);
}

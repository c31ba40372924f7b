//! Issue 15, the parts beside the terminal: an agent starts where its caller stands,
//! input piped into `grove spawn` reaches it (and never stays at rest), agent presets,
//! pause and resume, notifications.

mod support;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use support::*;

/// Landlock must be there for the jailed cases (CI has it and requires it).
fn landlock() -> bool {
    use grove_agent_shim::jail::{kernel_abi, REQUIRED_ABI};
    let abi = kernel_abi();
    let missing = (abi < REQUIRED_ABI)
        .then(|| format!("the kernel's Landlock ABI is {abi}, the jail needs {REQUIRED_ABI}"));
    can_run("landlock", missing)
}

/// Runs `grove args...` in `dir` with `input` on its stdin (`None`: /dev/null).
fn grove_in(g: &Grove, dir: &Path, args: &[&str], input: Option<&[u8]>) -> (i32, String, String) {
    let mut command = g.command();
    command
        .current_dir(dir)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("running grove");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("stdin");
        // A refused spawn may stop reading early: a broken pipe is its answer, not ours.
        let _ = stdin.write_all(input);
    }
    let out = child.wait_with_output().expect("grove output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Spawns `sh -c script` from `dir` and returns the id.
fn spawn_in(g: &Grove, dir: &Path, extra: &[&str], script: &str, input: Option<&[u8]>) -> String {
    let mut args = vec!["spawn"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let (code, stdout, stderr) = grove_in(g, dir, &args, input);
    assert_eq!(code, 0, "spawn failed: {stderr}");
    stdout.trim().to_string()
}

fn finished_log(g: &Grove, id: &str) -> String {
    let record = g.wait(id);
    let log = g.ok(&["logs", id]);
    assert_eq!(record["outcome"], "succeeded", "{record}\n{log}");
    log
}

fn commit_dir(g: &Grove, dir: &str) {
    fs::create_dir_all(g.repo.join(dir)).expect("mkdir");
    fs::write(g.repo.join(dir).join("file"), "x\n").expect("write");
    g.git(&["add", "."]);
    g.git(&["commit", "-qm", "a subdirectory"]);
}

fn agent_count(g: &Grove) -> usize {
    g.json(&["list", "--all"])["agents"]
        .as_array()
        .map_or(0, Vec::len)
}

// 1. Where the agent starts.

#[test]
fn an_agent_starts_in_the_callers_subdirectory_of_its_worktree() {
    let g = Grove::new();
    commit_dir(&g, "src/deep");
    let id = spawn_in(&g, &g.repo.join("src/deep"), &[], "pwd; ls", None);
    let log = finished_log(&g, &id);
    let record = g.record(&id);
    let worktree = record["worktree"].as_str().expect("worktree");
    assert!(
        log.contains(&format!("{worktree}/src/deep\n")),
        "the agent did not start in src/deep of {worktree}: {log}"
    );
    assert!(log.contains("file"), "{log}");
    assert_eq!(record["subdir"], "src/deep");
    // From the top, the top.
    let top = spawn_in(&g, &g.repo, &[], "pwd", None);
    let log = finished_log(&g, &top);
    let worktree = g.record(&top)["worktree"].as_str().expect("wt").to_string();
    assert_eq!(log.lines().next(), Some(worktree.as_str()), "{log}");
}

#[test]
fn a_directory_the_worktree_lacks_starts_the_agent_at_the_root_and_says_so() {
    let g = Grove::new();
    let untracked = g.repo.join("scratch/notes");
    fs::create_dir_all(&untracked).expect("mkdir");
    let id = spawn_in(&g, &untracked, &[], "echo at $(pwd)", None);
    let log = finished_log(&g, &id);
    let worktree = g.record(&id)["worktree"].as_str().expect("wt").to_string();
    assert!(log.contains(&format!("at {worktree}\n")), "{log}");
    assert!(
        log.contains("scratch/notes is not a directory of this worktree")
            && log.contains("starts at the worktree's root"),
        "the log does not say why the agent started at the root: {log}"
    );
}

#[test]
fn a_committed_symlink_does_not_start_the_agent_outside_its_worktree() {
    let g = Grove::new();
    std::os::unix::fs::symlink("/tmp", g.repo.join("out")).expect("symlink");
    g.git(&["add", "out"]);
    g.git(&["commit", "-qm", "a link out"]);
    // The user's checkout has a real directory there (an uncommitted change); the
    // agent's worktree has the committed link.
    fs::remove_file(g.repo.join("out")).expect("rm");
    fs::create_dir(g.repo.join("out")).expect("mkdir");
    let id = spawn_in(&g, &g.repo.join("out"), &[], "pwd", None);
    let log = finished_log(&g, &id);
    let worktree = g.record(&id)["worktree"].as_str().expect("wt").to_string();
    assert!(
        log.lines().any(|l| l == worktree) && !log.lines().any(|l| l == "/tmp"),
        "{log}"
    );
}

#[test]
fn a_jailed_agent_starts_in_the_callers_subdirectory_too() {
    if !landlock() {
        return;
    }
    let g = Grove::new();
    commit_dir(&g, "pkg");
    let id = spawn_in(
        &g,
        &g.repo.join("pkg"),
        &["--jail"],
        "pwd; echo made > here",
        None,
    );
    let log = finished_log(&g, &id);
    let record = g.record(&id);
    let worktree = record["worktree"].as_str().expect("wt");
    assert!(log.contains(&format!("{worktree}/pkg\n")), "{log}");
    let branch = record["branch"].as_str().expect("branch");
    assert_eq!(g.git(&["show", &format!("{branch}:pkg/here")]), "made\n");
}

// 2. Piped input.

#[test]
fn input_piped_into_spawn_reaches_the_agent() {
    let g = Grove::new();
    let id = spawn_in(&g, &g.repo, &[], "read x; echo got $x", Some(b"hello\n"));
    assert_eq!(g.record(&id)["stdin_bytes"], 6);
    let log = finished_log(&g, &id);
    assert!(log.contains("got hello"), "{log}");
    // --no-stdin: the agent reads nothing.
    let id = spawn_in(
        &g,
        &g.repo,
        &["--no-stdin"],
        "if read x; then echo got $x; else echo eof; fi",
        Some(b"hello\n"),
    );
    let log = finished_log(&g, &id);
    assert!(log.contains("eof"), "{log}");
    // Without input, /dev/null as before.
    let id = spawn_in(
        &g,
        &g.repo,
        &[],
        "if read x; then echo got; else echo eof; fi",
        None,
    );
    assert!(finished_log(&g, &id).contains("eof"));
}

#[test]
fn binary_input_arrives_byte_for_byte() {
    let g = Grove::new();
    let input: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let out = g.dir.path().join("got");
    let id = spawn_in(
        &g,
        &g.repo,
        &[],
        &format!("cat > {}", out.display()),
        Some(&input),
    );
    finished_log(&g, &id);
    assert!(
        fs::read(&out).expect("output") == input,
        "the input changed on its way"
    );
}

#[test]
fn a_queued_agent_gets_its_input_and_it_is_not_kept_once_it_started() {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "1")]);
    let hold = g.dir.path().join("hold");
    let first = g.spawn(
        &[],
        &format!("while [ ! -e {} ]; do sleep 0.05; done", hold.display()),
    );
    let secret = format!("secret-{}", std::process::id());
    let queued = spawn_in(
        &g,
        &g.repo,
        &[],
        "read x; echo got $x",
        Some(format!("{secret}\n").as_bytes()),
    );
    assert_eq!(g.status(&queued), "queued");
    let kept = g.home.join("agents").join(&queued).join("stdin");
    let mode = fs::metadata(&kept)
        .expect("the queued input is kept")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    // A restart while queued keeps it too.
    g.crash_daemon();
    g.ok(&["list"]);
    fs::write(&hold, "").expect("release");
    assert_eq!(g.wait(&first)["exit_code"], 0);
    let log = finished_log(&g, &queued);
    assert!(log.contains(&format!("got {secret}")), "{log}");
    assert!(!kept.exists(), "the input stayed at rest after the start");
}

#[test]
fn a_cancelled_queued_agent_leaves_no_input_behind() {
    let g = Grove::new().with_env(&[("GROVE_MAX_WORKTREES", "1")]);
    let hold = g.dir.path().join("hold");
    let first = g.spawn(
        &[],
        &format!("while [ ! -e {} ]; do sleep 0.05; done", hold.display()),
    );
    let queued = spawn_in(&g, &g.repo, &[], "cat", Some(b"private\n"));
    let kept = g.home.join("agents").join(&queued).join("stdin");
    assert!(kept.exists());
    g.ok(&["kill", &queued]);
    assert!(!kept.exists(), "the cancelled agent's input stayed on disk");
    fs::write(&hold, "").expect("release");
    g.wait(&first);
}

#[test]
fn oversize_input_is_refused_whole_and_nothing_is_spawned() {
    let g = Grove::new();
    let input = vec![b'x'; grove_proto::MAX_SPAWN_STDIN_BYTES + 1];
    let (code, stdout, stderr) = grove_in(&g, &g.repo, &["spawn", "--", "cat"], Some(&input));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("over 512 KiB") && stderr.contains("--no-stdin"),
        "{stderr}"
    );
    assert_eq!(agent_count(&g), 0, "something was spawned");
    // Exactly the cap is fine.
    input_at_the_cap(&g);
}

fn input_at_the_cap(g: &Grove) {
    let input = vec![b'y'; grove_proto::MAX_SPAWN_STDIN_BYTES];
    let id = spawn_in(g, &g.repo, &[], "wc -c", Some(&input));
    let log = finished_log(g, &id);
    assert!(
        log.contains(&grove_proto::MAX_SPAWN_STDIN_BYTES.to_string()),
        "{log}"
    );
}

#[test]
fn bad_input_over_the_socket_is_refused() {
    let g = Grove::new();
    g.ok(&["list"]);
    let mut client = client(&g);
    let answer = call(
        &mut client,
        "agent.spawn",
        serde_json::json!({
            "argv": ["cat"], "repo": g.repo, "stdin_b64": "not base64!"
        }),
    );
    let text = format!("{answer:?}");
    assert!(text.contains("stdin_b64 is not base64"), "{text}");
    assert_eq!(agent_count(&g), 0);
}

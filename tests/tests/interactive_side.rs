//! Issue 15, the parts beside the terminal: an agent starts where its caller stands,
//! input piped into `grove spawn` reaches it (and never stays at rest), agent presets,
//! pause and resume, notifications.

mod support;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use support::*;

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
    let log = g.succeeded_log(&id);
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
    let log = g.succeeded_log(&top);
    let worktree = g.record(&top)["worktree"].as_str().expect("wt").to_string();
    assert_eq!(log.lines().next(), Some(worktree.as_str()), "{log}");
}

#[test]
fn a_directory_the_worktree_lacks_starts_the_agent_at_the_root_and_says_so() {
    let g = Grove::new();
    let untracked = g.repo.join("scratch/notes");
    fs::create_dir_all(&untracked).expect("mkdir");
    let id = spawn_in(&g, &untracked, &[], "echo at $(pwd)", None);
    let log = g.succeeded_log(&id);
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
    let log = g.succeeded_log(&id);
    let worktree = g.record(&id)["worktree"].as_str().expect("wt").to_string();
    assert!(
        log.lines().any(|l| l == worktree) && !log.lines().any(|l| l == "/tmp"),
        "{log}"
    );
}

#[test]
fn a_jailed_agent_starts_in_the_callers_subdirectory_and_gets_its_input_too() {
    if !have_landlock() {
        return;
    }
    let g = Grove::new();
    commit_dir(&g, "pkg");
    let id = spawn_in(
        &g,
        &g.repo.join("pkg"),
        &["--jail"],
        "pwd; read x; echo \"$x\" > here",
        Some(b"made\n"),
    );
    let log = g.succeeded_log(&id);
    let record = g.record(&id);
    let worktree = record["worktree"].as_str().expect("wt");
    assert!(log.contains(&format!("{worktree}/pkg\n")), "{log}");
    // Its input too: the shim opened it before the jail closed.
    let kept = g.home.join("agents").join(&id).join("stdin");
    assert!(!kept.exists(), "the input stayed at rest");
    let branch = record["branch"].as_str().expect("branch");
    assert_eq!(g.file_at(branch, "pkg/here"), "made\n");
}

// 2. Piped input.

#[test]
fn input_piped_into_spawn_reaches_the_agent() {
    let g = Grove::new();
    let id = spawn_in(&g, &g.repo, &[], "read x; echo got $x", Some(b"hello\n"));
    assert_eq!(g.record(&id)["stdin_bytes"], 6);
    let log = g.succeeded_log(&id);
    assert!(log.contains("got hello"), "{log}");
    // --no-stdin: the agent reads nothing.
    let id = spawn_in(
        &g,
        &g.repo,
        &["--no-stdin"],
        "if read x; then echo got $x; else echo eof; fi",
        Some(b"hello\n"),
    );
    let log = g.succeeded_log(&id);
    assert!(log.contains("eof"), "{log}");
    // Without input, /dev/null as before.
    let id = spawn_in(
        &g,
        &g.repo,
        &[],
        "if read x; then echo got; else echo eof; fi",
        None,
    );
    assert!(g.succeeded_log(&id).contains("eof"));
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
    g.succeeded_log(&id);
    assert!(
        fs::read(&out).expect("output") == input,
        "the input changed on its way"
    );
}

#[test]
fn a_queued_agent_gets_its_input_and_it_is_not_kept_once_it_started() {
    let (g, first, hold) = one_slot_held();
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
    let log = g.succeeded_log(&queued);
    assert!(log.contains(&format!("got {secret}")), "{log}");
    assert!(!kept.exists(), "the input stayed at rest after the start");
}

#[test]
fn a_cancelled_queued_agent_leaves_no_input_behind() {
    let (g, first, hold) = one_slot_held();
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
    let log = g.succeeded_log(&id);
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

// 3. Agent presets.

fn print_argv(g: &Grove, args: &[&str]) -> Vec<String> {
    let mut all = vec!["spawn", "--print-argv"];
    all.extend_from_slice(args);
    serde_json::from_str(g.ok(&all).trim()).expect("a JSON argv")
}

#[test]
fn built_in_presets_build_their_documented_argv() {
    let g = Grove::new();
    let task = "fix the flaky test";
    // Claude Code gets grove's hooks as its settings (a JSON string, checked below).
    let hooks = print_argv(&g, &["--agent", "claude"])[2].clone();
    let parsed: serde_json::Value = serde_json::from_str(&hooks).expect("hooks JSON");
    assert!(parsed["hooks"]["Stop"].is_array(), "{hooks}");
    let hooks = hooks.as_str();
    for (name, interactive, headless) in [
        (
            "claude",
            vec!["claude", "--settings", hooks, task],
            vec!["claude", "-p", task],
        ),
        ("codex", vec!["codex", task], vec!["codex", "exec", task]),
        ("gemini", vec!["gemini", task], vec!["gemini", "-p", task]),
        (
            "aider",
            vec!["aider"],
            vec!["aider", "--yes-always", "--message", task],
        ),
    ] {
        if name != "aider" {
            assert_eq!(print_argv(&g, &["--agent", name, task]), interactive);
        }
        assert_eq!(
            print_argv(
                &g,
                &["--agent", name, "--headless", "fix", "the", "flaky", "test"]
            ),
            headless,
            "{name}"
        );
    }
    assert_eq!(
        print_argv(&g, &["--agent", "claude"]),
        ["claude", "--settings", hooks]
    );
    assert_eq!(print_argv(&g, &["--agent", "aider"]), ["aider"]);
    // A prompt that would be dropped is refused instead.
    g.refused(
        &["spawn", "--print-argv", "--agent", "aider", "do it"],
        "takes no prompt",
    );
    g.refused(
        &["spawn", "--agent", "claude", "--headless"],
        "needs a prompt",
    );
    let listed = g.json(&["agents"]);
    let names: Vec<&str> = each(&listed, "agents")
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["aider", "claude", "codex", "gemini"]);
    assert_eq!(listed["agents"][1]["source"], "built-in");
    assert_eq!(listed["agents"][1]["tty"], true);
}

#[test]
fn a_user_preset_runs_its_command_with_the_prompt_and_its_env() {
    let g = Grove::new();
    let script = g.write_file(
        "show-argv",
        "#!/bin/sh\nfor a in \"$@\"; do echo \"arg: $a\"; done\necho \"var: $PRESET_VAR\"\n",
    );
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    g.write_config(format!(
            "max_worktrees = 5\n[agents.mine]\ncommand = [\"{}\", \"--task={{prompt}}\", \"{{prompt}}\"]\n\
             env = {{ PRESET_VAR = \"from the preset\" }}\n\
             [agents.claude]\ncommand = [\"{}\", \"claude-override\"]\n",
            script.display(),
            script.display()
        ));
    let id = g
        .ok(&["spawn", "--agent", "mine", "two words"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(
        log.contains("arg: --task=two words\narg: two words\nvar: from the preset\n"),
        "{log}"
    );
    // The user's preset replaces the built-in of that name; --env wins over the preset's.
    let id = g
        .ok(&["spawn", "--agent", "claude", "--env", "PRESET_VAR=mine"])
        .trim()
        .to_string();
    let log = g.succeeded_log(&id);
    assert!(log.contains("arg: claude-override\nvar: mine\n"), "{log}");
    let listed = g.json(&["agents"]);
    let claude = each(&listed, "agents")
        .find(|p| p["name"] == "claude")
        .expect("claude")
        .clone();
    assert!(claude["source"]
        .as_str()
        .expect("source")
        .ends_with("config.toml"));
}

#[test]
fn a_repository_preset_adds_names_but_never_replaces_a_known_one() {
    let g = Grove::new();
    fs::write(
        g.repo.join(".grove.toml"),
        "[agents.lint]\ncommand = [\"sh\", \"-c\", \"echo linting\"]\n\
         [agents.claude]\ncommand = [\"sh\", \"-c\", \"echo hijacked\"]\n",
    )
    .expect("write");
    g.git(&["add", ".grove.toml"]);
    g.git(&["commit", "-qm", "presets"]);
    let argv = print_argv(&g, &["--agent", "claude", "hi"]);
    assert_eq!(
        [argv[0].as_str(), argv[1].as_str(), argv[3].as_str()],
        ["claude", "--settings", "hi"],
        "the built-in, not the repository's: {argv:?}"
    );
    let out = g.run(&["agents"]);
    assert!(out.stdout.contains("lint"), "{}", out.stdout);
    assert!(out.stderr.contains("never replaces"), "{}", out.stderr);
    // The daemon takes a .grove.toml with presets.
    let id = g.ok(&["spawn", "--agent", "lint"]).trim().to_string();
    assert!(g.succeeded_log(&id).contains("linting"));
}

/// What a preset's CLI writes into the worktree for itself (`cli_files`: aider's chat
/// history, a cache directory) never comes back as work; a repository's preset cannot
/// hide anything from salvage that way.
#[test]
fn a_presets_cli_files_are_never_salvaged_onto_its_branch() {
    let g = Grove::new();
    let work = "echo hist > .notes.history; mkdir -p .cli-cache; echo c > .cli-cache/x; \
                echo work > work.txt";
    g.write_config(format!(
        "[agents.notes]\ncommand = [\"sh\", \"-c\", \"{work}\"]\n\
         cli_files = [\".notes.history\", \".cli-cache\"]\n"
    ));
    let id = g.ok(&["spawn", "--agent", "notes"]).trim().to_string();
    g.succeeded_log(&id);
    let files = g.git(&["ls-tree", "-r", "--name-only", &format!("grove/{id}")]);
    assert!(files.lines().any(|f| f == "work.txt"), "{files}");
    assert!(
        !files.contains(".notes.history") && !files.contains(".cli-cache"),
        "{files}"
    );
    // An agent that left only its CLI's files has no work to review.
    g.write_config(
        "[agents.chat]\ncommand = [\"sh\", \"-c\", \"echo h > .notes.history\"]\n\
         cli_files = [\".notes.history\"]\n",
    );
    let chat = g.ok(&["spawn", "--agent", "chat"]).trim().to_string();
    g.succeeded_log(&chat);
    let review = g.ok(&["review"]);
    assert!(review.contains(&id) && !review.contains(&chat), "{review}");

    fs::write(
        g.repo.join(".grove.toml"),
        format!(
            "[agents.hide]\ncommand = [\"sh\", \"-c\", \"{work}\"]\n\
             cli_files = [\"work.txt\", \".notes.history\"]\n"
        ),
    )
    .expect("write");
    g.git(&["add", ".grove.toml"]);
    g.git(&["commit", "-qm", "a preset"]);
    let id = g.ok(&["spawn", "--agent", "hide"]).trim().to_string();
    g.succeeded_log(&id);
    let files = g.git(&["ls-tree", "-r", "--name-only", &format!("grove/{id}")]);
    assert!(
        files.lines().any(|f| f == "work.txt") && files.contains(".notes.history"),
        "a repository's preset hid work from salvage: {files}"
    );
    // Bad entries are refused where they are read.
    g.write_config("[agents.bad]\ncommand = [\"true\"]\ncli_files = [\"../up\"]\n");
    g.refused_all(&["spawn", "--agent", "bad"], &["cli_files entry `../up`"]);
}

/// Issue 30, item 6: `grove diff` of a running agent leaves out what its preset's CLI
/// writes for itself, as its branch will.
#[test]
fn a_running_agents_diff_leaves_out_its_clis_files() {
    let g = Grove::new();
    let gate = g.dir.path().join("gate");
    let work = format!(
        "echo hist > .notes.history; echo work > work.txt; \
         while [ ! -e {} ]; do sleep 0.05; done",
        gate.display()
    );
    g.write_config(format!(
        "[agents.notes]\ncommand = [\"sh\", \"-c\", \"{work}\"]\n\
         cli_files = [\".notes.history\"]\n"
    ));
    let id = g.ok(&["spawn", "--agent", "notes"]).trim().to_string();
    let mut diff = String::new();
    eventually(
        "the running agent's diff shows its work",
        Duration::from_secs(30),
        || {
            diff = g.ok(&["diff", &id]);
            diff.contains("work.txt")
        },
    );
    assert!(!diff.contains(".notes.history"), "{diff}");
    fs::write(&gate, "").expect("gate");
    g.succeeded_log(&id);
}

/// Issue 30, item 1: the hooks Claude Code's preset gives it, run as Claude Code runs
/// them (a shell, the agent's environment, `grove` on its PATH), tell grove the agent
/// waits (Stop, Notification) and works again (UserPromptSubmit).
#[test]
fn claudes_preset_hooks_tell_grove_when_it_waits_and_works() {
    let g = Grove::new();
    let hooks = print_argv(&g, &["--agent", "claude"])[2].clone();
    let hooks: serde_json::Value = serde_json::from_str(&hooks).expect("hooks JSON");
    let command = |event: &str| {
        hooks["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .expect("a command")
            .to_string()
    };
    let bin = g.make_dir("bin");
    std::os::unix::fs::symlink(BIN, bin.join("grove")).expect("symlink");
    let path = format!(
        "PATH={}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gate = |name: &str| g.dir.path().join(name);
    let wait_for = |name: &str| {
        format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done",
            gate(name).display()
        )
    };
    let script = format!(
        "{}; {}; {}; {}",
        command("Stop"),
        wait_for("prompted"),
        command("UserPromptSubmit"),
        wait_for("done")
    );
    let id = g.spawn(&["--env", &path], &script);
    eventually(
        "the Stop hook says waiting",
        Duration::from_secs(30),
        || g.record(&id)["activity"] == "waiting",
    );
    fs::write(gate("prompted"), "").expect("gate");
    eventually(
        "the prompt hook says working",
        Duration::from_secs(30),
        || g.record(&id)["activity"] != "waiting",
    );
    fs::write(gate("done"), "").expect("gate");
    g.succeeded_log(&id);
}

/// Issue 30, item 8: the README's hooks snippet, for running `claude` without the
/// preset, is JSON Claude Code reads and says for each event what the preset's hooks
/// say.
#[test]
fn the_readmes_claude_hooks_snippet_matches_the_presets() {
    let g = Grove::new();
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md");
    let snippet = readme
        .split("```json\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("\"hooks\""))
        .expect("a hooks snippet in README.md");
    let snippet: serde_json::Value = serde_json::from_str(snippet).expect("the snippet is JSON");
    let preset = print_argv(&g, &["--agent", "claude"])[2].clone();
    let preset: serde_json::Value = serde_json::from_str(&preset).expect("hooks JSON");
    // The activity each event's command sets.
    let said = |hooks: &serde_json::Value| -> Vec<(String, String)> {
        let mut said: Vec<(String, String)> = hooks["hooks"]
            .as_object()
            .expect("hooks by event")
            .iter()
            .map(|(event, entries)| {
                let command = entries[0]["hooks"][0]["command"].as_str().unwrap_or("");
                let activity = command
                    .strip_prefix("grove status ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .unwrap_or(command);
                (event.clone(), activity.to_string())
            })
            .collect();
        said.sort();
        said
    };
    assert_eq!(said(&snippet), said(&preset));
    assert!(said(&snippet)
        .iter()
        .any(|(e, a)| e == "Stop" && a == "waiting"));
}

#[test]
fn an_unknown_preset_is_refused_with_the_names_and_nothing_spawns() {
    let g = Grove::new();
    g.refused_all(
        &["spawn", "--agent", "clod", "fix it"],
        &["no agent preset `clod`", "aider, claude, codex, gemini"],
    );
    // A preset whose program is not on the caller's PATH: refused at spawn, exit 2.
    // (Not a built-in's: CI installs the real CLIs, for tests/jail_clis.rs.)
    g.write_config("[agents.ghost]\ncommand = [\"grove-test-no-such-cli\", \"{prompt}\"]\n");
    let out = g.run(&["spawn", "--agent", "ghost", "hi"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("command not found: grove-test-no-such-cli"),
        "{}",
        out.stderr
    );
    // A bad preset table is named with its file.
    g.write_config("[agents.x]\ntty = true\n");
    g.refused(&["agents"], "[agents.x] has no `command`");
    assert_eq!(agent_count_without_daemon(&g), 0);
}

fn agent_count_without_daemon(g: &Grove) -> usize {
    fs::remove_file(g.home.join("config.toml")).expect("rm");
    agent_count(g)
}

// 4. Pause and resume.

/// A script that writes an ever-growing number to `file` every 100 ms.
fn counter(file: &Path) -> String {
    format!(
        "echo $$ > {0}.pid; i=0; while :; do i=$((i+1)); echo $i > {0}.tmp; mv {0}.tmp {0}; sleep 0.1; done",
        file.display()
    )
}

/// The cgroup v2 directory of process `pid`.
fn cgroup_of(pid: &str) -> std::path::PathBuf {
    let line = fs::read_to_string(format!("/proc/{}/cgroup", pid.trim())).expect("cgroup");
    let path = line
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line");
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mount = mounts
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|t| t.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split(' ').nth(4))
        .unwrap_or("/sys/fs/cgroup");
    Path::new(mount).join(path.trim_start_matches('/'))
}

fn count(file: &Path) -> u64 {
    fs::read_to_string(file)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// A [`counter`] that grove does not run: while it ticks, a counter that is not
/// stopped gets its turns too. Killed when dropped.
struct Witness {
    file: std::path::PathBuf,
    shell: std::process::Child,
}

impl Witness {
    fn start(g: &Grove) -> Self {
        let file = g.dir.path().join("witness");
        let shell = std::process::Command::new("sh")
            .args(["-c", &counter(&file)])
            .spawn()
            .expect("sh");
        let witness = Self { file, shell };
        advances(&witness.file);
        witness
    }

    /// Returns once the witness ticked `n` times more.
    fn ticks(&self, n: u64) {
        let from = count(&self.file);
        eventually("the witness to tick", Duration::from_secs(30), || {
            count(&self.file) >= from + n
        });
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

/// Waits until the counter stands still: unchanged while the witness, which loops as
/// it does, ticks three times. A load that slows both cannot make it pass.
fn stands_still(file: &Path, witness: &Witness) {
    eventually("the counter to stop", Duration::from_secs(30), || {
        let before = count(file);
        witness.ticks(3);
        before > 0 && count(file) == before
    });
}

fn advances(file: &Path) {
    let before = count(file);
    eventually("the counter to advance", Duration::from_secs(10), || {
        count(file) > before + 2
    });
}

fn pause_and_resume(g: &Grove) {
    let file = g.dir.path().join("count");
    let witness = Witness::start(g);
    let id = g.spawn(&[], &counter(&file));
    advances(&file);
    let paused = g.json(&["pause", &id]);
    assert_eq!(paused["status"], "paused");
    stands_still(&file, &witness);
    assert_eq!(g.status(&id), "paused");
    let listed = g.ok(&["list"]);
    assert!(listed.contains("paused"), "{listed}");
    // Twice is a clear error, and changes nothing.
    g.fails(&["pause", &id], &["nothing to pause"]);
    assert_eq!(g.json(&["resume", &id])["status"], "running");
    advances(&file);
    let again = g.run(&["resume", &id]);
    assert!(
        again.stderr.contains("nothing to resume"),
        "{}",
        again.stderr
    );
    g.ok(&["kill", &id]);
}

#[test]
fn pause_freezes_the_whole_tree_and_resume_thaws_it() {
    let g = Grove::new();
    pause_and_resume(&g);
}

#[test]
fn without_a_cgroup_pause_stops_the_tree_with_signals() {
    let g = Grove::new().with_env(&[("GROVE_CGROUP", "false")]);
    pause_and_resume(&g);
}

#[test]
fn a_timeout_counts_paused_time_and_ends_a_frozen_agent() {
    for cgroup in ["true", "false"] {
        let g = Grove::new().with_env(&[("GROVE_CGROUP", cgroup)]);
        let file = g.dir.path().join("count");
        let id = g.spawn(&["--timeout", "2s"], &counter(&file));
        advances(&file);
        g.ok(&["pause", &id]);
        let done = g.wait(&id);
        assert_eq!(done["outcome"], "timed_out", "cgroup={cgroup}: {done}");
        assert_eq!(done["status"], "collected");
    }
}

#[test]
fn pause_and_resume_are_events() {
    let g = Grove::new();
    let id = g.spawn(&[], "sleep 30");
    let mut events = client(&g);
    call(
        &mut events,
        "events.subscribe",
        serde_json::json!({ "agent": id }),
    )
    .expect("subscribe");
    g.ok(&["pause", &id]);
    g.ok(&["resume", &id]);
    let paused = events.next_notification().expect("event");
    assert_eq!(paused.method, "agent.paused");
    assert_eq!(paused.params["status"], "paused");
    let resumed = events.next_notification().expect("event");
    assert_eq!(resumed.method, "agent.resumed");
    assert_eq!(resumed.params["status"], "running");
    g.ok(&["kill", &id]);
}

/// The freezer can take seconds; nobody else waits for it. While a pause is held
/// before its freeze lands, other clients are answered, a second pause of the same
/// agent is refused, and a kill goes through: the pause then says the agent ended.
#[test]
fn a_freeze_under_way_holds_up_no_other_client_nor_a_kill() {
    let gate = tempfile::tempdir().expect("tempdir");
    let release = gate.path().join("release");
    let g = Grove::new().with_env(&[
        ("GROVE_TEST_HOLD_AT", "freezing"),
        ("GROVE_TEST_HOLD_UNTIL", release.to_str().expect("utf-8")),
    ]);
    let id = g.spawn(&[], "sleep 60");
    let other = g.spawn(&[], "sleep 60");
    let mut pause = g.command();
    pause
        .args(["pause", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let pause = pause.spawn().expect("grove pause");
    eventually(
        "the pause to reach its freeze",
        Duration::from_secs(20),
        || g.daemon_log().contains("GROVE_TEST_HOLD_AT: holding here"),
    );
    // Everyone else is answered meanwhile.
    assert_eq!(g.status(&other), "running");
    assert!(g.ok(&["list"]).contains(&other));
    let third = g.spawn(&[], "true");
    assert_eq!(g.wait(&third)["outcome"], "succeeded");
    g.fails(&["pause", &id], &["is being paused already"]);
    assert_eq!(g.status(&id), "running");
    let killed = g.run(&["kill", &id]);
    assert_eq!(killed.code, 0, "{}", killed.stderr);
    fs::write(&release, "").expect("release");
    let paused = pause.wait_with_output().expect("grove pause ends");
    let said = String::from_utf8_lossy(&paused.stderr);
    assert!(
        !paused.status.success(),
        "the pause of a killed agent said it paused"
    );
    assert!(said.contains("ended while it was being paused"), "{said}");
    let done = g.wait(&id);
    assert_eq!(done["outcome"], "killed", "{done}");
    assert_eq!(done["status"], "collected", "{done}");
    g.ok(&["kill", &other]);
}

#[test]
fn pausing_what_does_not_run_is_a_clear_error() {
    let g = Grove::new();
    let id = g.spawn(&[], "true");
    g.wait(&id);
    g.refused(
        &["pause", &id],
        &format!("agent {id} is succeeded, so there is nothing to pause"),
    );
    let out = g.run(&["pause", "nosuchid"]);
    assert_ne!(out.code, 0);
}

#[test]
fn a_paused_agent_can_be_killed_and_survives_a_daemon_restart_paused() {
    let g = Grove::new();
    let file = g.dir.path().join("count");
    let witness = Witness::start(&g);
    let id = g.spawn(&[], &counter(&file));
    advances(&file);
    g.ok(&["pause", &id]);
    stands_still(&file, &witness);
    g.crash_daemon();
    assert_eq!(
        g.status(&id),
        "paused",
        "the restarted daemon lost the pause"
    );
    stands_still(&file, &witness);
    g.ok(&["resume", &id]);
    advances(&file);
    // The freezer is the truth: thawed while no daemon ran, the agent is running.
    g.ok(&["pause", &id]);
    let pid = fs::read_to_string(g.dir.path().join("count.pid")).expect("pid");
    let freeze = cgroup_of(&pid).join("cgroup.freeze");
    let missing =
        (!freeze.exists()).then(|| format!("no cgroup v2 freezer at {}", freeze.display()));
    if !can_run("cgroup2", missing) {
        return;
    }
    g.crash_daemon();
    fs::write(&freeze, "0").expect("thaw by hand");
    assert_eq!(
        g.status(&id),
        "running",
        "the restarted daemon ignored the freezer"
    );
    advances(&file);
    g.ok(&["pause", &id]);
    let killed = g.json(&["kill", &id]);
    assert_eq!(killed["outcome"], "killed", "{killed}");
}

#[test]
fn an_agent_pauses_its_children_but_not_itself_nor_others() {
    let g = Grove::new();
    let file = g.dir.path().join("count");
    let other = g.spawn(&[], "sleep 30");
    let script = format!(
        "child=$($GROVE_BIN spawn -- sh -c '{}') || exit 9\n\
         sleep 0.5\n\
         $GROVE_BIN pause $child && echo paused-child\n\
         $GROVE_BIN pause $GROVE_AGENT_ID 2>&1 || echo refused-self\n\
         $GROVE_BIN pause {other} 2>&1 || echo refused-other\n\
         $GROVE_BIN resume $child && echo resumed-child\n\
         $GROVE_BIN kill $child >/dev/null\n",
        counter(&file)
    );
    let bin = format!("GROVE_BIN={BIN}");
    let id = g.spawn(&["--env", &bin], &script);
    let log = g.succeeded_log(&id);
    assert_holds_all(
        &log,
        &[
            "paused-child",
            "refused-self",
            "refused-other",
            "resumed-child",
        ],
    );
    assert!(log.contains("may not pause itself"), "{log}");
    assert_eq!(g.status(&other), "running", "{log}");
    g.ok(&["kill", &other]);
}

// 5. Notifications.

/// A grove whose `[notify]` command appends its GROVE_* environment to `out`, one run
/// per block ending in `---`.
fn notifying(events: &str) -> (Grove, std::path::PathBuf) {
    let g = Grove::new();
    let out = g.dir.path().join("notified");
    g.write_config(format!(
            "[notify]\ncommand = [\"sh\", \"-c\", \"env | grep ^GROVE_ | sort >> {0}; echo --- >> {0}\"]\n\
             events = {events}\nwindow = \"2s\"\ndesktop = false\n",
            out.display()
        ));
    (g, out)
}

/// The runs of the notify command so far, each as its GROVE_* lines.
fn runs(out: &Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(out).unwrap_or_default();
    text.split("---\n")
        .filter(|run| !run.trim().is_empty())
        .map(|run| run.lines().map(str::to_string).collect())
        .collect()
}

fn var<'a>(run: &'a [String], name: &str) -> Option<&'a str> {
    run.iter().find_map(|l| l.strip_prefix(&format!("{name}=")))
}

#[test]
fn agents_ending_together_give_one_summary_run() {
    let (g, out) = notifying("[\"exited\", \"failed\"]");
    let go = g.dir.path().join("go");
    let wait_then = |code: u32| {
        format!(
            "while [ ! -e {} ]; do sleep 0.02; done; exit {code}",
            go.display()
        )
    };
    let mut ids: Vec<String> = (0..4).map(|_| g.spawn(&[], &wait_then(0))).collect();
    ids.push(g.spawn(&["--name", "broken"], &wait_then(3)));
    fs::write(&go, "").expect("go");
    for id in &ids {
        g.wait(id);
    }
    eventually("the notify command to run", Duration::from_secs(10), || {
        !runs(&out).is_empty()
    });
    let all = runs(&out);
    assert_eq!(all.len(), 1, "more than one run: {all:?}");
    let run = &all[0];
    assert_eq!(var(run, "GROVE_EVENT_COUNT"), Some("5"), "{run:?}");
    let mut told: Vec<&str> = var(run, "GROVE_AGENT_IDS")
        .expect("ids")
        .split(' ')
        .collect();
    told.sort_unstable();
    ids.sort_unstable();
    assert_eq!(told, ids);
    assert_eq!(var(run, "GROVE_EVENT"), Some("exited,failed"), "{run:?}");
    assert!(
        var(run, "GROVE_SUMMARY").is_some_and(|s| s.contains("5 agents: 4 exited, 1 failed")),
        "{run:?}"
    );
}

#[test]
fn one_failure_is_told_with_its_id_name_event_and_status() {
    let (g, out) = notifying("[\"failed\"]");
    // A success is not what was asked for: it never runs the command.
    let fine = g.spawn(&[], "true");
    g.wait(&fine);
    let id = g.spawn(&["--name", "flaky"], "exit 1");
    g.wait(&id);
    eventually("the notify command to run", Duration::from_secs(10), || {
        !runs(&out).is_empty()
    });
    let all = runs(&out);
    assert_eq!(all.len(), 1, "{all:?}");
    let run = &all[0];
    assert_eq!(var(run, "GROVE_AGENT_ID"), Some(id.as_str()), "{run:?}");
    assert_eq!(var(run, "GROVE_AGENT_NAME"), Some("flaky"));
    assert_eq!(var(run, "GROVE_EVENT"), Some("failed"));
    assert_eq!(var(run, "GROVE_STATUS"), Some("failed (exit 1)"));
    assert_eq!(var(run, "GROVE_EVENT_COUNT"), Some("1"));
}

#[test]
fn a_bad_notify_setting_is_named_and_nothing_starts() {
    let g = Grove::new();
    g.write_config("[notify]\ncommand = [\"true\"]\nevents = [\"done\"]\n");
    g.fails(
        &["config"],
        &["unknown event `done`", "waiting, exited, failed"],
    );
}

#[test]
fn an_agent_waiting_at_its_terminal_is_told() {
    let (g, out) = notifying("[\"waiting\"]");
    let id = g
        .ok(&[
            "spawn",
            "--tty",
            "--name",
            "asker",
            "--",
            "sh",
            "-c",
            "printf 'continue? '; read x; sleep 30",
        ])
        .trim()
        .to_string();
    eventually("the notify command to run", Duration::from_secs(15), || {
        !runs(&out).is_empty()
    });
    let run = &runs(&out)[0];
    assert_eq!(var(run, "GROVE_AGENT_ID"), Some(id.as_str()), "{run:?}");
    assert_eq!(var(run, "GROVE_EVENT"), Some("waiting"), "{run:?}");
    assert_eq!(var(run, "GROVE_AGENT_NAME"), Some("asker"));
    g.ok(&["kill", &id]);
}

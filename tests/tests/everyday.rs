//! Everyday polish of the command line (issue 16): JSON errors, `logs -f` ending with
//! the outcome, every setting's effective value, list filters, automatic sessions
//! hidden, and a hint for `grove spawn sh -c ...` without `--`.

mod support;

use serde_json::Value;
use support::*;

#[test]
fn with_json_errors_are_json_on_stderr_with_the_same_exit_codes() {
    let g = Grove::new();
    let text = g.run(&["show", "zzzz"]);
    let json = g.run(&["--json", "show", "zzzz"]);
    assert_eq!(text.code, 2);
    assert_eq!(json.code, text.code, "{}", json.stderr);
    assert!(text.stderr.starts_with("grove: error:"), "{}", text.stderr);
    let error: Value = serde_json::from_str(json.stderr.trim()).expect("JSON on stderr");
    assert_eq!(error["error"]["code"], 2);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("zzzz"),
        "{error}"
    );
    assert!(json.stdout.is_empty());
    // A usage error found before any command runs, too.
    let usage = g.run(&["--json", "list", "--bogus"]);
    assert_eq!(usage.code, 2);
    let error: Value = serde_json::from_str(usage.stderr.trim()).expect("JSON on stderr");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--bogus"),
        "{error}"
    );
}

#[test]
fn spawn_without_dashes_says_to_put_the_command_after_them_and_starts_nothing() {
    let g = Grove::new();
    g.refused(
        &["spawn", "--name", "x", "sh", "-c", "echo hi > F"],
        "put the agent's command after `--`: grove spawn --name x -- sh -c 'echo hi > F'",
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
}

#[test]
fn logs_follow_ends_with_the_outcome_line_and_the_agents_status() {
    let g = Grove::new();
    let failing = g.spawn(&[], "sleep 1; echo last words; exit 3");
    let out = g.run(&["logs", "-f", &failing]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("last words"), "{}", out.stdout);
    assert!(
        !out.stdout.contains(&failing),
        "the outcome is not in the agent's output"
    );
    assert!(
        out.stderr.contains(&failing) && out.stderr.contains("exit 3"),
        "{}",
        out.stderr
    );
    let fine = g.spawn(&[], "echo fine");
    g.wait(&fine);
    let out = g.run(&["logs", "-f", &fine]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("succeeded"), "{}", out.stderr);
}

#[test]
fn config_shows_the_effective_value_of_every_setting() {
    let g = Grove::new().with_env(&[
        ("GROVE_TIMEOUT", "10m"),
        ("GROVE_ENV_ALLOW", "A,B"),
        ("GROVE_JAIL", "true"),
    ]);
    let config = g.json(&["config"]);
    let settings = config["settings"].as_array().expect("settings");
    let value = |key: &str| {
        settings
            .iter()
            .find(|s| s["key"] == key)
            .map(|s| s["value"].clone())
            .unwrap_or_default()
    };
    for s in settings {
        assert!(
            !s["value"].as_str().unwrap_or("").contains("see the daemon"),
            "{s}"
        );
    }
    assert_eq!(value("timeout"), "10m");
    assert_eq!(value("env_allow"), "A,B");
    assert_eq!(value("jail"), "true");
    assert_eq!(value("max_files"), "none");
}

#[test]
fn list_filters_by_repo_status_and_name_and_session_list_hides_automatic_sessions() {
    let g = Grove::new();
    let good = g.spawn(&["--name", "good"], "true");
    let bad = g.spawn(&["--name", "bad", "--session", "shared"], "exit 1");
    g.wait(&good);
    g.wait(&bad);
    let ids = |args: &[&str]| listed_ids(&g, "list", args);
    assert_eq!(ids(&["--all", "--name", "good"]), vec![good.clone()]);
    assert_eq!(ids(&["--status", "failed"]), vec![bad.clone()]);
    assert_eq!(ids(&["--status", "succeeded"]), vec![good.clone()]);
    let repo = g.repo.to_string_lossy().into_owned();
    assert_eq!(ids(&["--all", "--repo", &repo]).len(), 2);
    let elsewhere = g.dir.path().to_string_lossy().into_owned();
    assert!(ids(&["--all", "--repo", &elsewhere]).is_empty());
    let text = g.ok(&["list", "--all", "--name", "bad"]);
    assert!(text.contains(&bad) && !text.contains(&good), "{text}");
    let bogus = g.run(&["list", "--status", "sleepy"]);
    assert_eq!(bogus.code, 2);

    let sessions =
        |args: &[&str]| listed_fields(&g, &["session", "list"], args, "sessions", "name");
    assert_eq!(sessions(&[]), ["shared"]);
    // `good` never wrote state: its automatic session does not exist (issue 17).
    let every = sessions(&["--all"]);
    assert_eq!(every, ["shared"], "{every:?}");
}

#[test]
fn a_name_works_wherever_an_id_does_and_an_ambiguous_one_lists_the_candidates() {
    let g = Grove::new();
    let beta = g.spawn(&["--name", "beta"], "echo b > B");
    g.wait(&beta);
    assert_eq!(g.record("beta")["id"], beta.as_str());
    assert!(g.ok(&["diff", "beta"]).contains("+b"));
    // --base takes an agent's name (or id) for its branch.
    let child = g.spawn(&["--base", "beta"], "test -f B");
    assert_eq!(g.wait(&child)["outcome"], "succeeded");
    let by_id = g.spawn(&["--base", &beta], "test -f B");
    assert_eq!(g.wait(&by_id)["outcome"], "succeeded");
    let twin = g.spawn(&["--name", "beta"], "true");
    g.wait(&twin);
    g.refused_all(
        &["show", "beta"],
        &["2 agents are named `beta`", &beta, &twin],
    );
    g.refused(&["show", "gamma"], "`gamma` or that name");
}

#[test]
fn a_grove_toml_with_an_unknown_table_is_refused_with_the_known_ones() {
    let g = Grove::new();
    std::fs::write(g.repo.join(".grove.toml"), "[worktre]\ncopy = [\".env\"]\n").expect("write");
    g.refused_all(
        &["spawn", "--", "true"],
        &["unknown table or key `worktre`", "[state] and [worktree]"],
    );
    assert_eq!(g.json(&["list", "--all"])["agents"], serde_json::json!([]));
    let out = g.run(&["trust"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

/// An agent named "tabbed", and a PATH whose `grove` is this grove (the completion
/// scripts call `grove __agents`).
fn completion_setup(g: &Grove) -> (String, String) {
    let id = g.spawn(&["--name", "tabbed"], "true");
    g.wait(&id);
    let bin = g.make_dir("bin");
    std::os::unix::fs::symlink(BIN, bin.join("grove")).expect("symlink");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (id, path)
}

/// A grove set up by `completion_setup`, and its agent's id and PATH; none where
/// `shell` does not run.
fn completion_grove(shell: &str) -> Option<(Grove, String, String)> {
    if !have_shell(shell) {
        return None;
    }
    let g = Grove::new();
    let (id, path) = completion_setup(&g);
    Some((g, id, path))
}

/// `complete`, from a command line to the candidates a shell offers, offers the agent
/// `id` ("tabbed") by id, prefix and name, and still the subcommands.
fn assert_completes_agents(id: &str, complete: impl Fn(&str) -> Vec<String>) {
    let all = complete("grove show ");
    assert!(
        all.iter().any(|c| c == id) && all.contains(&"tabbed".to_string()),
        "{all:?}"
    );
    assert_eq!(complete("grove merge tab"), ["tabbed"]);
    assert_eq!(complete(&format!("grove wait {}", &id[..3])), vec![id]);
    assert!(complete("grove sho").contains(&"show".to_string()));
    // The commands of a running agent's terminal take an agent too.
    for command in ["attach", "send", "screen", "pause"] {
        assert_eq!(
            complete(&format!("grove {command} tab")),
            ["tabbed"],
            "{command}"
        );
    }
    // The internal command the scripts ask is never offered.
    let internal = complete("grove __");
    assert!(
        !internal.iter().any(|c| c.contains("__agents")),
        "{internal:?}"
    );
}

/// Whether `shell` runs here (CI installs zsh and fish, .ci/run).
fn have_shell(shell: &str) -> bool {
    have_program(shell, &["-c", "exit 0"])
}

/// Runs `shell args...` with the grove's environment; its stdout lines.
fn shell_lines(g: &Grove, path: &str, shell: &str, args: &[&str]) -> Vec<String> {
    let mut command = std::process::Command::new(shell);
    command
        .args(args)
        .envs(grove_env(g))
        .env("PATH", path)
        .env("TMPDIR", g.dir.path());
    stdout_of(&mut command, shell)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn bash_completion_completes_agent_ids_and_names() {
    let g = Grove::new();
    let (id, path) = completion_setup(&g);
    let complete = |words: &str, cword: usize| -> Vec<String> {
        let script = format!(
            "source <(grove completions bash) || exit 9\n\
             COMP_WORDS=({words}); COMP_CWORD={cword}\n\
             _grove_with_agents grove \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        shell_lines(&g, &path, "bash", &["-c", &script])
    };
    let all = complete("grove --json show ''", 3);
    assert!(
        all.contains(&id) && all.contains(&"tabbed".to_string()),
        "{all:?}"
    );
    assert_eq!(complete("grove merge tab", 2), ["tabbed"]);
    let prefix = &id[..3];
    assert_eq!(
        complete(&format!("grove wait {prefix}"), 2),
        vec![id.clone()]
    );
    // Subcommands still complete as before.
    assert!(complete("grove sho", 1).contains(&"show".to_string()));
    for command in ["attach", "send", "screen", "pause"] {
        assert_eq!(
            complete(&format!("grove {command} tab"), 2),
            ["tabbed"],
            "{command}"
        );
    }
    assert!(!complete("grove __", 1).contains(&"__agents".to_string()));
}

/// Completes a command line in a real interactive zsh, in a pseudo-terminal (zsh's own
/// zpty module): the line is typed, TAB pressed, and every candidate the completion
/// system offers printed; TAB is bound to a widget that completes, then prints a marker
/// that ends the session.
const ZSH_CAPTURE: &str = r#"
zmodload zsh/zpty || exit 9
zpty z zsh -f -i
zpty -w z "PROMPT='>'; RPROMPT=; autoload -Uz compinit; compinit -u -d $TMPDIR/zcompdump"
zpty -w z "source <(grove completions zsh) || exit 8"
zpty -w z 'compadd () { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi; typeset -a __hits; builtin compadd -A __hits "$@"; local r=$?; (( $#__hits )) && print -r -l -- "<h""it>"${^__hits}; return $r }'
zpty -w z '_capture() { zle complete-word; print -r -- "<e""nd>" }; zle -N _capture; bindkey "^I" _capture; zstyle ":completion:*" menu no'
# Type the line only once the shell waits for input: typeahead can be dropped.
zpty -w z "print -r -- '<rea''dy>'"
while zpty -r z line; do [[ $line == '<ready>'* ]] && break; done
zpty -w -n z "$1"$'\t'
while zpty -r z line; do
  [[ $line == *'<hit>'* ]] && print -r -- ${${line#*<hit>}%%$'\r'*}
  [[ $line == *'<end>'* ]] && break
done
zpty -d z
"#;

#[test]
fn zsh_completion_completes_agent_ids_and_names() {
    let Some((g, id, path)) = completion_grove("zsh") else {
        return;
    };
    let script = g.write_file("capture.zsh", ZSH_CAPTURE);
    let script = script.to_str().expect("utf-8 path").to_string();
    // A bound on the whole session: a completion that never ends fails the test.
    let complete =
        |line: &str| shell_lines(&g, &path, "timeout", &["60", "zsh", "-f", &script, line]);
    assert_completes_agents(&id, complete);
    assert_eq!(complete("grove discard tab"), ["tabbed"]);
}

#[test]
fn fish_completion_completes_agent_ids_and_names() {
    let Some((g, id, path)) = completion_grove("fish") else {
        return;
    };
    // `complete -C` asks fish's own completion machinery, as TAB would.
    let complete = |line: &str| -> Vec<String> {
        let script = format!(
            "grove completions fish | source; or exit 9\ncomplete -C {}",
            shell_quote(line)
        );
        shell_lines(&g, &path, "fish", &["--no-config", "-c", &script])
            .into_iter()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect()
    };
    assert_completes_agents(&id, complete);
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[test]
fn an_untracked_grove_toml_does_not_block_a_merge_that_does_not_touch_it() {
    let g = Grove::new();
    std::fs::write(g.repo.join(".grove.toml"), "[worktree]\n").expect("write");
    g.git(&["config", "user.name", "Test User"]);
    g.git(&["config", "user.email", "user@example.invalid"]);
    let id = g.spawn(&[], "echo work > WORK.txt");
    g.wait(&id);
    let out = g.run(&["merge", &id]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(g.repo.join("WORK.txt").exists());
    assert_eq!(
        std::fs::read_to_string(g.repo.join(".grove.toml")).unwrap_or_default(),
        "[worktree]\n",
        "the untracked file is as it was"
    );
}

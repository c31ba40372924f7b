//! Agent presets: `[agents.NAME]` of `config.toml` and `.grove.toml`, and the built-in
//! ones. Pure: the client reads the files and resolves a preset into an argv, so that
//! the command and its PATH lookup are the caller's.

use crate::toml_table::{flag, only_known_keys, strings};
use std::collections::BTreeMap;

/// The keys an `[agents.NAME]` table has.
const KEYS: &[&str] = &[
    "command",
    "headless",
    "tty",
    "env",
    "jail_home",
    "cli_files",
];

/// The placeholder of an argv template that the prompt replaces.
pub const PROMPT: &str = "{prompt}";

/// Claude Code's hooks, given to it by the preset (`--settings`): it tells grove
/// itself when it waits for its user and when it works again, beside grove's own reading
/// of its terminal. `grove` from the agent's PATH; where there is none, the hook does
/// nothing, so Claude Code never shows a failed hook.
pub const CLAUDE_HOOKS: &str = concat!(
    r#"{"hooks":{"#,
    r#""Notification":[{"hooks":[{"type":"command","command":"grove status waiting >/dev/null 2>&1 || true"}]}],"#,
    r#""Stop":[{"hooks":[{"type":"command","command":"grove status waiting >/dev/null 2>&1 || true"}]}],"#,
    r#""UserPromptSubmit":[{"hooks":[{"type":"command","command":"grove status working >/dev/null 2>&1 || true"}]}]"#,
    r#"}}"#
);

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Preset {
    pub name: String,
    /// `built-in`, or the file it was read from.
    pub source: String,
    /// The interactive argv template.
    pub command: Vec<String>,
    /// The argv template for non-interactive use (`--headless`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headless: Option<Vec<String>>,
    /// Run it in a terminal (`spawn --tty`).
    pub tty: bool,
    /// Variables set for the agent (below the spawn's own `--env`).
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// What its CLI keeps in `$HOME` (paths relative to it), copied into the private
    /// home of a jailed agent (`--jail`): the CLI starts as it would unjailed, and
    /// what the agent writes there never reaches the user's files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jail_home: Vec<String>,
    /// What its CLI writes into the worktree for itself (paths relative to it: its chat
    /// history, caches, per-project settings): never salvaged onto the agent's branch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cli_files: Vec<String>,
}

/// Presets for the common coding CLIs, from their documented flags: an initial prompt
/// as the positional argument of the interactive program, and each one's
/// non-interactive mode (`claude -p`, `codex exec`, `gemini -p`, `aider --message`).
/// aider has no "first message, then chat": its interactive form takes no prompt.
pub fn builtins() -> Vec<Preset> {
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let preset = |name: &str, command: &[&str], headless: &[&str], files: [&[&str]; 2]| Preset {
        name: name.into(),
        source: "built-in".into(),
        command: strings(command),
        headless: Some(strings(headless)),
        tty: true,
        env: BTreeMap::new(),
        jail_home: strings(files[0]),
        cli_files: strings(files[1]),
    };
    // What each CLI reads at start in `$HOME` (its settings, login and state), then
    // what it writes into the worktree for itself.
    vec![
        preset(
            "claude",
            &["claude", "--settings", CLAUDE_HOOKS, PROMPT],
            &["claude", "-p", PROMPT],
            [
                &[".claude", ".claude.json"],
                &[".claude/settings.local.json"],
            ],
        ),
        preset(
            "codex",
            &["codex", PROMPT],
            &["codex", "exec", PROMPT],
            [&[".codex"], &[]],
        ),
        preset(
            "gemini",
            &["gemini", PROMPT],
            &["gemini", "-p", PROMPT],
            [&[".gemini"], &[".gemini"]],
        ),
        preset(
            "aider",
            &["aider"],
            &["aider", "--yes-always", "--message", PROMPT],
            [
                &[".aider.conf.yml", ".aider"],
                &[
                    ".aider.chat.history.md",
                    ".aider.input.history",
                    ".aider.tags.cache.v4",
                ],
            ],
        ),
    ]
}

/// The `[agents]` table of a TOML document (`config.toml` or `.grove.toml`), if any.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Preset>, String> {
    let top: toml::Table = text.parse().map_err(|e| format!("{origin}: {e}"))?;
    let Some(agents) = top.get("agents") else {
        return Ok(Vec::new());
    };
    let agents = agents
        .as_table()
        .ok_or_else(|| format!("{origin}: `agents` must be a table of [agents.NAME] tables"))?;
    agents
        .iter()
        .map(|(name, value)| one(name, value, origin))
        .collect()
}

fn one(name: &str, value: &toml::Value, origin: &str) -> Result<Preset, String> {
    let at = format!("{origin}: [agents.{name}]");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "{at}: a preset name is letters, digits, `-`, `_` or `.`"
        ));
    }
    let table = value
        .as_table()
        .ok_or_else(|| format!("{at} must be a table with `command`"))?;
    only_known_keys(table, KEYS, &at, "a preset")?;
    let argv = |key: &str| -> Result<Option<Vec<String>>, String> {
        match strings(table, key, &at) {
            Ok(None) => Ok(None),
            Ok(Some(list)) if list.first().is_some_and(|program| !program.is_empty()) => {
                Ok(Some(list))
            }
            _ => Err(format!(
                "{at}: `{key}` must be a non-empty list of strings, e.g. [\"claude\", \"{PROMPT}\"]"
            )),
        }
    };
    let command = argv("command")?.ok_or_else(|| format!("{at} has no `command`"))?;
    let tty = flag(table, "tty", false, &at)?;
    let mut env = BTreeMap::new();
    if let Some(value) = table.get("env") {
        let vars = value
            .as_table()
            .ok_or_else(|| format!("{at}: `env` must be a table of NAME = \"value\""))?;
        for (var, value) in vars {
            let value = value
                .as_str()
                .ok_or_else(|| format!("{at}: env `{var}` must be a string"))?;
            env.insert(var.clone(), value.to_string());
        }
    }
    let jail_home = strings(table, "jail_home", &at)
        .map_err(|_| format!("{at}: `jail_home` must be a list of paths relative to $HOME"))?
        .unwrap_or_default();
    for entry in &jail_home {
        check_home_entry(entry).map_err(|e| format!("{at}: {e}"))?;
    }
    let cli_files = strings(table, "cli_files", &at)
        .map_err(|_| format!("{at}: `cli_files` must be a list of paths relative to the worktree"))?
        .unwrap_or_default();
    for entry in &cli_files {
        check_cli_file(entry).map_err(|e| format!("{at}: {e}"))?;
    }
    Ok(Preset {
        name: name.into(),
        source: origin.into(),
        command,
        headless: argv("headless")?,
        tty,
        env,
        jail_home,
        cli_files,
    })
}

/// Secrets never copied into a jailed agent's home, whatever a preset asks: the
/// jail's view hides the same ones (`supervisor/jail_view.rs`, `HOME_HIDDEN`).
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
];

/// A `jail_home` entry names a path below `$HOME` and no secret: an absolute path or
/// `..` would copy any file of the user's into the jail.
pub fn check_home_entry(entry: &str) -> Result<(), String> {
    use std::path::Path;
    let path = Path::new(entry);
    if !plain_relative(entry) {
        return Err(format!(
            "jail_home entry `{entry}` must be a path relative to $HOME without `..`, \
             e.g. \".claude\""
        ));
    }
    let normal: std::path::PathBuf = path.components().collect();
    if let Some(secret) = HOME_SECRETS
        .iter()
        .find(|s| normal.starts_with(s) || Path::new(s).starts_with(&normal))
    {
        return Err(format!(
            "jail_home entry `{entry}` would copy `~/{secret}`, which a jailed agent never gets"
        ));
    }
    Ok(())
}

/// A `cli_files` entry names a path inside the worktree.
pub fn check_cli_file(entry: &str) -> Result<(), String> {
    if plain_relative(entry) {
        return Ok(());
    }
    Err(format!(
        "cli_files entry `{entry}` must be a path relative to the worktree without `..`, \
         e.g. \".aider.chat.history.md\""
    ))
}

/// A relative path of plain names: no root, no `..`, not empty.
fn plain_relative(entry: &str) -> bool {
    use std::path::{Component, Path};
    let path = Path::new(entry);
    !entry.is_empty()
        && !entry.contains('\0')
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && path.components().any(|c| matches!(c, Component::Normal(_)))
}

/// Built-ins, then `user` (config.toml) over them by name, then `repo` (`.grove.toml`)
/// for names neither has: a repository's file is anyone's commit, and must not change
/// what a name the user already knows runs. Returns the presets and the repository's
/// shadowed ones (named, so that `grove agents` can say so).
pub fn merge(user: Vec<Preset>, repo: Vec<Preset>) -> (Vec<Preset>, Vec<Preset>) {
    let mut all: BTreeMap<String, Preset> = builtins()
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    for preset in user {
        all.insert(preset.name.clone(), preset);
    }
    let mut shadowed = Vec::new();
    for mut preset in repo {
        // A repository's file is anyone's commit: its preset must not copy files of
        // the user's home (a login token, say) into a jail it then reads them from.
        preset.jail_home.clear();
        // Nor hide an agent's work from salvage: what is left out is never saved.
        preset.cli_files.clear();
        if all.contains_key(&preset.name) {
            shadowed.push(preset);
        } else {
            all.insert(preset.name.clone(), preset);
        }
    }
    (all.into_values().collect(), shadowed)
}

/// The argv of `preset` for `prompt`. Every `{prompt}` in an argument is replaced; with
/// no prompt, an argument that is exactly `{prompt}` is left out.
pub fn render(
    preset: &Preset,
    headless: bool,
    prompt: Option<&str>,
) -> Result<Vec<String>, String> {
    let template = if headless {
        preset.headless.as_ref().ok_or_else(|| {
            format!(
                "preset `{}` has no headless form; give it `headless = [...]` in [agents.{}]",
                preset.name, preset.name
            )
        })?
    } else {
        &preset.command
    };
    let takes_prompt = template.iter().any(|a| a.contains(PROMPT));
    match prompt {
        Some(_) if !takes_prompt => Err(format!(
            "preset `{}` takes no prompt{}: its command is {:?}",
            preset.name,
            if headless { "" } else { " interactively (try --headless)" },
            template
        )),
        Some(prompt) => Ok(template.iter().map(|a| a.replace(PROMPT, prompt)).collect()),
        None if headless && takes_prompt => Err(format!(
            "preset `{}` --headless needs a prompt: grove spawn --agent {} --headless \"what to do\"",
            preset.name, preset.name
        )),
        None => {
            if let Some(arg) = template.iter().find(|a| a.contains(PROMPT) && *a != PROMPT) {
                return Err(format!(
                    "preset `{}` needs a prompt for its argument `{arg}`",
                    preset.name
                ));
            }
            Ok(template.iter().filter(|a| *a != PROMPT).cloned().collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(name: &str) -> Preset {
        builtins().into_iter().find(|p| p.name == name).expect(name)
    }

    #[test]
    fn prompts_fill_templates_and_are_never_dropped() {
        let claude = builtin("claude");
        assert_eq!(
            render(&claude, false, Some("fix it")).expect("ok"),
            ["claude", "--settings", CLAUDE_HOOKS, "fix it"]
        );
        assert_eq!(
            render(&claude, false, None).expect("ok"),
            ["claude", "--settings", CLAUDE_HOOKS]
        );
        assert!(render(&claude, true, None).is_err());
        let aider = builtin("aider");
        assert!(render(&aider, false, Some("x")).is_err());
    }

    #[test]
    fn claudes_hooks_are_json_that_tell_grove_when_it_waits() {
        let hooks: serde_json::Value = serde_json::from_str(CLAUDE_HOOKS).expect("JSON");
        let command = |event: &str| hooks["hooks"][event][0]["hooks"][0]["command"].clone();
        assert_eq!(hooks["hooks"]["Stop"][0]["hooks"][0]["type"], "command");
        for (event, activity) in [
            ("Notification", "waiting"),
            ("Stop", "waiting"),
            ("UserPromptSubmit", "working"),
        ] {
            let command = command(event);
            assert!(
                command
                    .as_str()
                    .is_some_and(|c| c.starts_with(&format!("grove status {activity} "))),
                "{event}: {command}"
            );
        }
    }

    #[test]
    fn repository_presets_do_not_shadow_known_names() {
        let user = parse("[agents.claude]\ncommand = [\"my-claude\"]\n", "u").expect("ok");
        let repo = parse(
            "[agents.claude]\ncommand = [\"evil\"]\n[agents.lint]\ncommand = [\"make\", \"lint\"]\n",
            "r",
        )
        .expect("ok");
        let (all, shadowed) = merge(user, repo);
        let claude = all.iter().find(|p| p.name == "claude").expect("ok");
        assert_eq!(claude.command, ["my-claude"]);
        assert!(all.iter().any(|p| p.name == "lint"));
        assert_eq!(shadowed.len(), 1);
    }

    #[test]
    fn jail_home_stays_below_home_and_off_secrets_and_repos() {
        for bad in [
            "../x",
            "/etc",
            "",
            ".",
            "a/../../b",
            ".ssh",
            ".ssh/id_rsa",
            ".config",
        ] {
            assert!(check_home_entry(bad).is_err(), "{bad}");
        }
        assert!(check_home_entry(".claude").is_ok());
        assert!(check_home_entry("./.config/foo").is_ok());
        let text = "[agents.x]\ncommand = [\"a\"]\njail_home = [\".x\"]\n";
        assert_eq!(parse(text, "u").expect("ok")[0].jail_home, [".x"]);
        let bad = "[agents.x]\ncommand = [\"a\"]\njail_home = [\"../x\"]\n";
        assert!(parse(bad, "u").expect_err("refused").contains("../x"));
        let (all, _) = merge(Vec::new(), parse(text, "r").expect("ok"));
        let x = all.iter().find(|p| p.name == "x").expect("x");
        assert!(x.jail_home.is_empty(), "a repository's preset gets no home");
    }

    #[test]
    fn cli_files_stay_inside_the_worktree_and_repos_get_none() {
        for bad in ["../x", "/etc/passwd", "", "a/../../b"] {
            assert!(check_cli_file(bad).is_err(), "{bad}");
        }
        assert!(builtin("aider")
            .cli_files
            .contains(&".aider.chat.history.md".to_string()));
        let text = "[agents.x]\ncommand = [\"a\"]\ncli_files = [\"notes.log\"]\n";
        assert_eq!(parse(text, "u").expect("ok")[0].cli_files, ["notes.log"]);
        let bad = "[agents.x]\ncommand = [\"a\"]\ncli_files = [\"/x\"]\n";
        assert!(parse(bad, "u").expect_err("refused").contains("/x"));
        let (all, _) = merge(Vec::new(), parse(text, "r").expect("ok"));
        let x = all.iter().find(|p| p.name == "x").expect("x");
        assert!(
            x.cli_files.is_empty(),
            "a repository's preset hides nothing from salvage"
        );
    }

    #[test]
    fn bad_tables_are_named() {
        for bad in [
            "[agents.x]\ntty = true\n",
            "[agents.x]\ncommand = []\n",
            "[agents.x]\ncommand = [\"a\"]\nbogus = 1\n",
            "[agents.x]\ncommand = [\"a\"]\ntty = \"yes\"\n",
            "agents = 3\n",
        ] {
            let e = parse(bad, "f.toml").expect_err("an error");
            assert!(e.starts_with("f.toml"), "{e}");
        }
    }
}

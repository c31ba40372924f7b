//! Each CLI's trust store and its rule, read from the CLI's own code (Gemini CLI 0.61.0,
//! Codex 0.171.0, Claude Code 2.1.197; `tests/tests/cli_trust.rs` drives them):
//!
//! | CLI | file | trusted when |
//! |---|---|---|
//! | Gemini CLI | `~/.gemini/trustedFolders.json` | the longest path of the file that holds the folder (a `TRUST_PARENT` entry stands for its parent) says `TRUST_FOLDER` or `TRUST_PARENT`; `DO_NOT_TRUST` is a no |
//! | Codex | `~/.codex/config.toml` | `[projects."<path>"] trust_level = "trusted"` for the folder or its repository's root (a linked worktree's: the main checkout's) |
//! | Claude Code | `~/.claude.json` | `projects["<path>"].hasTrustDialogAccepted` for its repository's root (as Codex) or the folder or any parent |

use super::json_members::{self, Object};
use std::path::{Component, Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cli {
    Claude,
    Codex,
    Gemini,
}

/// What a trust store says of a folder.
#[derive(Debug, PartialEq, Eq)]
pub enum Says {
    Trusted,
    /// The user said no (Gemini CLI's `DO_NOT_TRUST`, Codex's `untrusted`).
    Refused,
    Nothing,
}

impl Cli {
    /// The CLI a program is, by its name (`argv[0]`, with or without a directory).
    pub fn of_program(program: &str) -> Option<Cli> {
        match Path::new(program).file_name()?.to_str()? {
            "claude" => Some(Cli::Claude),
            "codex" => Some(Cli::Codex),
            "gemini" => Some(Cli::Gemini),
            _ => None,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Cli::Claude => "Claude Code",
            Cli::Codex => "Codex",
            Cli::Gemini => "Gemini CLI",
        }
    }

    /// The store's directory below `$HOME` (`""`: `$HOME`) and file name.
    pub fn location(self) -> (&'static str, &'static str) {
        match self {
            Cli::Claude => ("", ".claude.json"),
            Cli::Codex => (".codex", "config.toml"),
            Cli::Gemini => (".gemini", "trustedFolders.json"),
        }
    }

    /// Variables with which the CLI reads another store, or decides without one: set
    /// for the agent, the file grove would write is not the one the CLI reads.
    pub fn moved_by(self) -> &'static [&'static str] {
        match self {
            Cli::Claude => &["CLAUDE_CONFIG_DIR"],
            Cli::Codex => &["CODEX_HOME"],
            Cli::Gemini => &[
                "GEMINI_CLI_HOME",
                "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
                "GEMINI_CLI_TRUST_WORKSPACE",
                "GEMINI_RESTRICTED_MODE",
            ],
        }
    }

    /// Whether the CLI takes its own lock on the file while it writes it.
    pub fn locks(self) -> bool {
        self == Cli::Gemini
    }

    /// What the store `text` says of `folder` (canonical), by the CLI's rule.
    pub fn says(self, text: &str, folder: &Path) -> Result<Says, String> {
        match self {
            Cli::Gemini => gemini_says(text, folder),
            Cli::Codex => codex_says(text, folder),
            Cli::Claude => claude_says(text, folder),
        }
    }

    /// `text` with an entry trusting `folder` (a path no entry names yet).
    pub fn add(self, text: &str, folder: &str) -> Result<String, String> {
        match self {
            Cli::Gemini => {
                let top = json_members::top(text)?;
                Ok(json_members::insert_first(text, &top, folder, |_| {
                    "\"TRUST_FOLDER\"".into()
                }))
            }
            Cli::Claude => {
                let top = json_members::top(text)?;
                let accepted = |indent: &str| {
                    format!("{{\n{indent}  \"hasTrustDialogAccepted\": true\n{indent}}}")
                };
                // A repository it trusts is one of its projects: `projects` is there.
                let projects = top.member("projects").ok_or("no `projects`")?;
                let projects = json_members::object_at(text, projects.value)?;
                Ok(json_members::insert_first(
                    text, &projects, folder, accepted,
                ))
            }
            Cli::Codex => {
                let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
                let projects = doc
                    .entry("projects")
                    .or_insert_with(|| {
                        let mut table = toml_edit::Table::new();
                        table.set_implicit(true);
                        toml_edit::Item::Table(table)
                    })
                    .as_table_like_mut()
                    .ok_or("`projects` is not a table")?;
                let mut entry = toml_edit::Table::new();
                entry.insert("trust_level", toml_edit::value("trusted"));
                projects.insert(folder, toml_edit::Item::Table(entry));
                Ok(doc.to_string())
            }
        }
    }

    /// `text` without the entry of `folder`, or `None` when it has none.
    pub fn remove(self, text: &str, folder: &str) -> Result<Option<String>, String> {
        let without = |object: &Object| {
            let index = object.members.iter().position(|m| m.key == folder)?;
            Some(json_members::remove(text, object, index))
        };
        match self {
            Cli::Gemini => Ok(without(&json_members::top(text)?)),
            Cli::Claude => {
                let top = json_members::top(text)?;
                let Some(projects) = top.member("projects") else {
                    return Ok(None);
                };
                Ok(without(&json_members::object_at(text, projects.value)?))
            }
            Cli::Codex => {
                let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
                let removed = doc
                    .get_mut("projects")
                    .and_then(|p| p.as_table_like_mut())
                    .and_then(|p| p.remove(folder));
                Ok(removed.map(|_| doc.to_string()))
            }
        }
    }
}

fn gemini_says(text: &str, folder: &Path) -> Result<Says, String> {
    let rules: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut best: Option<(usize, &str)> = None;
    for (path, level) in &rules {
        let level = level.as_str().unwrap_or("");
        let rule = real(Path::new(path));
        let holds = if level == "TRUST_PARENT" {
            rule.parent().unwrap_or(&rule).to_path_buf()
        } else {
            rule
        };
        if folder.starts_with(&holds) && best.is_none_or(|(len, _)| path.len() > len) {
            best = Some((path.len(), level));
        }
    }
    Ok(match best.map(|(_, level)| level) {
        Some("TRUST_FOLDER" | "TRUST_PARENT") => Says::Trusted,
        Some("DO_NOT_TRUST") => Says::Refused,
        _ => Says::Nothing,
    })
}

fn codex_says(text: &str, folder: &Path) -> Result<Says, String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
    let Some(projects) = doc.get("projects").and_then(|p| p.as_table()) else {
        return Ok(Says::Nothing);
    };
    let level = |path: &Path| {
        projects
            .iter()
            .find(|(key, _)| normal(Path::new(key)) == path)
            .and_then(|(_, p)| p.get("trust_level")?.as_str().map(str::to_string))
    };
    let found = level(folder).or_else(|| git_root(folder).and_then(|root| level(&root)));
    Ok(match found.as_deref() {
        Some("trusted") => Says::Trusted,
        Some("untrusted") => Says::Refused,
        _ => Says::Nothing,
    })
}

fn claude_says(text: &str, folder: &Path) -> Result<Says, String> {
    let config: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Some(projects) = config.get("projects").and_then(|p| p.as_object()) else {
        return Ok(Says::Nothing);
    };
    let accepted = |path: &Path| {
        projects.iter().any(|(key, project)| {
            normal(Path::new(key)) == path && project["hasTrustDialogAccepted"] == true
        })
    };
    let by_root = git_root(folder).is_some_and(|root| accepted(&root));
    Ok(if by_root || folder.ancestors().any(accepted) {
        Says::Trusted
    } else {
        Says::Nothing
    })
}

/// The repository root Codex and Claude Code take for `folder`: the directory of the
/// nearest `.git` above it, or for a linked worktree (a `.git` file pointing into
/// `<common>/worktrees/<name>`) the main checkout, `<common>`'s parent.
pub fn git_root(folder: &Path) -> Option<PathBuf> {
    let at = folder
        .ancestors()
        .find(|dir| dir.join(".git").symlink_metadata().is_ok())?;
    let dot_git = at.join(".git");
    if dot_git.is_dir() {
        return Some(at.to_path_buf());
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = at.join(text.trim().strip_prefix("gitdir:")?.trim());
    let worktrees = gitdir.parent()?;
    if worktrees.file_name()? != "worktrees" {
        return Some(at.to_path_buf());
    }
    let common = real(worktrees.parent()?);
    Some(if common.file_name()? == ".git" {
        common.parent()?.to_path_buf()
    } else {
        common
    })
}

/// `path` without `.`, `..` or a trailing slash, as node's `path.resolve` leaves it.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `path` with its links resolved where it exists (Gemini CLI compares real paths).
fn real(path: &Path) -> PathBuf {
    let path = normal(path);
    path.canonicalize().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_takes_the_longest_rule_and_a_parent_rule_for_its_parent() {
        let says =
            |text: &str, folder: &str| gemini_says(text, Path::new(folder)).expect("test input");
        let text = r#"{"/r": "TRUST_FOLDER", "/r/no": "DO_NOT_TRUST", "/p/x": "TRUST_PARENT"}"#;
        assert_eq!(says(text, "/r"), Says::Trusted);
        assert_eq!(says(text, "/r/sub"), Says::Trusted);
        assert_eq!(says(text, "/r/no/deeper"), Says::Refused);
        assert_eq!(says(text, "/p/y"), Says::Trusted, "TRUST_PARENT holds /p");
        assert_eq!(says(text, "/rr"), Says::Nothing, "a path, not a prefix");
        assert_eq!(says("{}", "/r"), Says::Nothing);
        assert!(gemini_says("// a comment\n{}", Path::new("/r")).is_err());
    }

    #[test]
    fn codex_and_claude_read_their_projects() {
        let codex = "[projects.\"/r\"]\ntrust_level = \"trusted\"\n[projects.\"/n\"]\ntrust_level = \"untrusted\"\n";
        assert_eq!(
            codex_says(codex, Path::new("/r")).expect("test input"),
            Says::Trusted
        );
        assert_eq!(
            codex_says(codex, Path::new("/n")).expect("test input"),
            Says::Refused
        );
        assert_eq!(
            codex_says(codex, Path::new("/r/a")).expect("test input"),
            Says::Nothing
        );
        let claude = r#"{"projects": {"/r": {"hasTrustDialogAccepted": true}, "/f": {}}}"#;
        assert_eq!(
            claude_says(claude, Path::new("/r/a/b")).expect("test input"),
            Says::Trusted
        );
        assert_eq!(
            claude_says(claude, Path::new("/f")).expect("test input"),
            Says::Nothing
        );
        assert_eq!(
            claude_says("{}", Path::new("/r")).expect("test input"),
            Says::Nothing
        );
    }

    #[test]
    fn entries_are_added_and_removed_leaving_the_rest_as_written() {
        let cases = [
            (Cli::Gemini, "{\n  \"/r\": \"TRUST_FOLDER\"\n}"),
            (
                Cli::Claude,
                "{\n  \"theme\": \"dark\",\n  \"projects\": {\n    \"/r\": {\n      \"hasTrustDialogAccepted\": true\n    }\n  }\n}\n",
            ),
            (
                Cli::Codex,
                "# mine\nmodel = \"o3\"\n\n[projects.\"/r\"]\ntrust_level = \"trusted\"\n",
            ),
            (Cli::Codex, "model = \"o3\" # mine\n"),
        ];
        for (cli, text) in cases {
            let added = cli.add(text, "/w").expect("test input");
            assert_eq!(
                cli.says(&added, Path::new("/w")).expect("test input"),
                Says::Trusted,
                "{added}"
            );
            assert_eq!(
                cli.remove(&added, "/w").expect("test input").as_deref(),
                Some(text),
                "{cli:?}"
            );
            assert_eq!(cli.remove(text, "/w").expect("test input"), None);
        }
        let claude = Cli::Claude.add(cases[1].1, "/w").expect("test input");
        assert!(
            claude.contains(
                "\"projects\": {\n    \"/w\": {\n      \"hasTrustDialogAccepted\": true\n    },\n    \"/r\""
            ),
            "{claude}"
        );
    }

    #[test]
    fn a_linked_worktree_stands_for_its_main_checkout() {
        let dir = tempfile::tempdir().expect("test input");
        let main = dir.path().canonicalize().expect("test input").join("main");
        std::fs::create_dir_all(main.join(".git/worktrees/w")).expect("test input");
        let linked = dir.path().canonicalize().expect("test input").join("w");
        std::fs::create_dir_all(linked.join("sub")).expect("test input");
        std::fs::write(
            linked.join(".git"),
            format!("gitdir: {}\n", main.join(".git/worktrees/w").display()),
        )
        .expect("test input");
        assert_eq!(git_root(&linked.join("sub")), Some(main.clone()));
        assert_eq!(git_root(&main), Some(main));
        assert_eq!(Cli::of_program("/usr/bin/gemini"), Some(Cli::Gemini));
        assert_eq!(Cli::of_program("aider"), None);
    }
}

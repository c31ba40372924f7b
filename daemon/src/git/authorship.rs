//! Whose the commits grove makes for an agent are: the author is the user (their git
//! identity from the repository's config), the committer grove, and the message names
//! the agent, so that `git log` and `git blame` tell the agent's work from the user's
//! and lead back to the agent's record (`Grove-Agent: <id>`).

use std::path::Path;

/// A name and an e-mail, as git records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

impl Identity {
    pub fn grove() -> Identity {
        Identity {
            name: "grove".into(),
            email: "grove@localhost".into(),
        }
    }
}

pub use crate::config::CommitAuthor;

/// Author, committer and message of one salvage commit.
#[derive(Debug, Clone)]
pub struct Authorship {
    pub author: Identity,
    pub committer: Identity,
    pub message: String,
}

/// What a salvage commit says about its agent.
pub struct AgentWork<'a> {
    pub id: &'a str,
    pub name: Option<&'a str>,
    pub argv: &'a [String],
    pub report: Option<&'a str>,
    /// Why grove committed now: `None` when the agent ended, else what removed it.
    pub removed: Option<&'a str>,
}

/// The user's identity as git would find it for this repository (its config, then the
/// user's global config). Read with libgit2, which parses config and runs nothing; the
/// repository at `common` is the user's, never a jailed agent's own. An identity git
/// would reject (angle brackets, line breaks) counts as none.
pub fn user_identity(common: &Path) -> Option<Identity> {
    let config = git2::Repository::open(common).ok()?.config().ok()?;
    let name = config.get_string("user.name").ok()?;
    let email = config.get_string("user.email").ok()?;
    let clean = |s: &str| !s.trim().is_empty() && !s.contains(['<', '>', '\n', '\r', '\0']);
    (clean(&name) && clean(&email)).then(|| Identity {
        name: name.trim().to_string(),
        email: email.trim().to_string(),
    })
}

/// The commit's author and committer for a repository whose git dir is `common`.
pub fn authorship(common: &Path, who: CommitAuthor, message: String) -> Authorship {
    let author = match who {
        CommitAuthor::User => user_identity(common).unwrap_or_else(Identity::grove),
        CommitAuthor::Grove => Identity::grove(),
    };
    Authorship {
        author,
        committer: Identity::grove(),
        message,
    }
}

/// "<name>: work left at exit" (or the first line of its report), a body saying what
/// happened, and the trailers.
pub fn message(work: &AgentWork<'_>) -> String {
    let who = one_line(work.name.unwrap_or(work.id), 40);
    let what = match (work.report.map(|r| one_line(r, 72)), work.removed) {
        (Some(report), _) if !report.is_empty() => report,
        (_, None) => "work left at exit".into(),
        (_, Some(why)) => format!("work left when it was removed ({})", one_line(why, 40)),
    };
    let body = match work.removed {
        None => "grove committed what the agent's worktree held when it ended.".to_string(),
        Some(why) => format!(
            "grove committed what the agent's worktree held when it was removed ({}).",
            one_line(why, 60)
        ),
    };
    format!(
        "{who}: {what}\n\n{body}\n\nGrove-Agent: {}\nGrove-Command: {}\n",
        one_line(work.id, 64),
        flat(&work.argv.join(" "), 200)
    )
}

/// `text` on one line (control characters as spaces), at most `max` characters.
fn flat(text: &str, max: usize) -> String {
    let spaced: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    one_line(&spaced, max)
}

/// The first line of `text`, control characters dropped, at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let clean: String = line.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.chars().count() <= max {
        return clean.to_string();
    }
    let cut: String = clean.chars().take(max.saturating_sub(3)).collect();
    format!("{}...", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work<'a>(argv: &'a [String], report: Option<&'a str>) -> AgentWork<'a> {
        AgentWork {
            id: "a1b2",
            name: Some("fixer"),
            argv,
            report,
            removed: None,
        }
    }

    #[test]
    fn the_message_names_the_agent_and_carries_the_trailers() {
        let argv = vec!["sh".to_string(), "-c".into(), "make\nfix".into()];
        let text = message(&work(&argv, None));
        assert!(text.starts_with("fixer: work left at exit\n\n"), "{text}");
        assert!(text.ends_with("Grove-Agent: a1b2\nGrove-Command: sh -c make fix\n"));
        let text = message(&work(&argv, Some("\n  Fixed the parser\nmore")));
        assert!(text.starts_with("fixer: Fixed the parser\n\n"), "{text}");
    }

    #[test]
    fn long_lines_are_cut() {
        let long = "x".repeat(500);
        assert_eq!(one_line(&long, 10), "xxxxxxx...");
    }
}

//! The environment an agent's command sees: the spawning client's, never the daemon's.

use crate::error::Error;
use grove_proto::env::{AGENT_IDENTITY_VARS, GIT_LOCATION_VARS};
use grove_proto::methods::{EnvVar, SpawnParams};

/// PATH of an agent whose client sent no environment.
pub const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What `--env-clear` keeps of the caller's environment, and all that an agent of a
/// client that sent none gets (PATH then being [`FALLBACK_PATH`]).
const ESSENTIAL: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG"];

pub struct AgentIdentity<'a> {
    pub agent_id: &'a str,
    pub session: &'a str,
    pub socket: &'a str,
    pub token: &'a str,
    pub worktree: &'a str,
    pub base: &'a str,
}

/// `env` (the caller's variables, then the user's `--env`) plus the agent's identity,
/// which nothing in `env` can replace.
pub fn agent_environment(
    identity: &AgentIdentity<'_>,
    env: &[(String, String)],
) -> Vec<(String, String)> {
    let own = [
        ("GROVE_AGENT_ID", identity.agent_id),
        ("GROVE_SESSION", identity.session),
        ("GROVE_SOCKET", identity.socket),
        ("GROVE_TOKEN", identity.token),
        ("GROVE_WORKTREE", identity.worktree),
        ("GROVE_BASE", identity.base),
    ];
    let mut all: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !AGENT_IDENTITY_VARS.contains(&k.as_str()))
        .cloned()
        .collect();
    all.extend(own.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    all
}

/// The variables an agent starts with, before grove's own: the caller's environment
/// (or a minimal one when the caller sent none), then `--env`. Kept as they are until
/// the agent starts, under the rules of `--env` values (see `db::agents`).
pub fn spawn_environment(params: &SpawnParams, env_allow: &[String]) -> Vec<(String, String)> {
    let mut env = match &params.caller_env {
        Some(caller) => from_caller(caller, params, env_allow),
        None => minimal_environment(),
    };
    if params.tty {
        // The agent's terminal is grove's (the shim's screen model, whatever terminal
        // attaches later), not the caller's: one TERM with 256 colours, as tmux gives
        // its panes, unless `--env TERM=...` says otherwise.
        env.retain(|(name, _)| name != "TERM");
        env.push(("TERM".into(), TTY_TERM.into()));
    }
    env.extend(params.env.iter().map(|v| (v.name.clone(), v.value.clone())));
    env
}

/// The TERM of an agent with a terminal.
pub const TTY_TERM: &str = "xterm-256color";

fn from_caller(
    caller: &[EnvVar],
    params: &SpawnParams,
    env_allow: &[String],
) -> Vec<(String, String)> {
    let kept = |name: &str| {
        !params.env_clear
            || ESSENTIAL.contains(&name)
            || params.env_keep.iter().any(|k| k == name)
            || env_allow.iter().any(|k| k == name)
    };
    caller
        .iter()
        .filter(|v| passed_on(&v.name) && kept(&v.name))
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect()
}

/// grove's identity variables belong to the caller (an agent spawning a child), git
/// location variables point at the caller's repository, and TMPDIR is replaced by the
/// agent's private one.
fn passed_on(name: &str) -> bool {
    !AGENT_IDENTITY_VARS.contains(&name)
        && !GIT_LOCATION_VARS.contains(&name)
        && !name.starts_with("GROVE_TEST_")
        && name != "TMPDIR"
}

/// For a client that sent no environment (an older grove, a raw socket caller): a
/// fixed PATH and who the user is, never the daemon's own variables.
pub fn minimal_environment() -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), FALLBACK_PATH.to_string())];
    for name in ESSENTIAL.iter().filter(|n| **n != "PATH") {
        if let Ok(value) = std::env::var(name) {
            env.push((name.to_string(), value));
        }
    }
    env
}

/// Checks the environment fields of a spawn: names that a process environment can
/// hold, values without NUL bytes.
pub fn validate(params: &SpawnParams) -> Result<(), Error> {
    let caller = params.caller_env.iter().flatten();
    for (what, var) in params
        .env
        .iter()
        .map(|v| ("environment variable", v))
        .chain(caller.map(|v| ("caller_env variable", v)))
    {
        check_name(what, &var.name)?;
        if var.value.contains('\0') {
            return Err(Error::BadInput(format!(
                "the value of {what} {} contains a NUL byte",
                var.name
            )));
        }
    }
    for name in &params.env_keep {
        check_name("--env-keep", name)?;
    }
    Ok(())
}

/// A command named without a `/` must be on the PATH the agent will get (the caller's,
/// or what `--env` sets): refused now rather than failing with exit 127 once it runs.
/// Relative PATH entries would be looked up in the worktree, which does not exist yet:
/// with one of those, the command is left to the start.
pub fn check_command(params: &SpawnParams) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let Some(program) = params.argv.first() else {
        return Ok(());
    };
    if program.is_empty() || program.contains('/') {
        return Ok(());
    }
    let path = spawn_environment(params, &[])
        .into_iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v)
        .unwrap_or_default();
    let dirs: Vec<&std::path::Path> = path.split(':').map(std::path::Path::new).collect();
    let found = dirs.iter().any(|dir| {
        !dir.is_absolute()
            || std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    if found {
        return Ok(());
    }
    Err(Error::BadInput(format!(
        "command not found: {program}; PATH searched: {path}"
    )))
}

fn check_name(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.contains(['=', '\0']) {
        let shown: String = name.chars().take(80).collect();
        return Err(Error::BadInput(format!(
            "{what} name `{shown}` is not valid: give NAME=VALUE with a non-empty NAME \
             without `=`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn the_callers_environment_less_identity_plus_env() {
        let params = SpawnParams {
            caller_env: Some(vec![
                var("PATH", "/caller/bin"),
                var("GROVE_TOKEN", "parent's"),
                var("GIT_DIR", "/elsewhere"),
                var("EDITOR", "vi"),
            ]),
            env: vec![var("EDITOR", "ed")],
            ..Default::default()
        };
        let env = spawn_environment(&params, &[]);
        assert_eq!(
            env,
            [
                ("PATH".into(), "/caller/bin".into()),
                ("EDITOR".into(), "vi".into()),
                ("EDITOR".into(), "ed".into())
            ]
        );
    }

    #[test]
    fn env_clear_keeps_the_essentials_kept_and_allowed_names() {
        let params = SpawnParams {
            caller_env: Some(vec![
                var("PATH", "/p"),
                var("SECRET", "s"),
                var("KEEP", "k"),
                var("ALLOWED", "a"),
            ]),
            env_clear: true,
            env_keep: vec!["KEEP".into()],
            ..Default::default()
        };
        let names: Vec<String> = spawn_environment(&params, &["ALLOWED".into()])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(names, ["PATH", "KEEP", "ALLOWED"]);
    }

    #[test]
    fn a_terminal_agent_gets_one_256_colour_term_unless_env_says_otherwise() {
        let tty = |env: Vec<EnvVar>| SpawnParams {
            caller_env: Some(vec![var("TERM", "dumb"), var("PATH", "/p")]),
            env,
            tty: true,
            ..Default::default()
        };
        let term = |params: &SpawnParams| {
            spawn_environment(params, &[])
                .into_iter()
                .filter(|(k, _)| k == "TERM")
                .map(|(_, v)| v)
                .next_back()
        };
        assert_eq!(term(&tty(vec![])).as_deref(), Some(TTY_TERM));
        assert_eq!(
            term(&tty(vec![var("TERM", "vt100")])).as_deref(),
            Some("vt100")
        );
        let plain = SpawnParams {
            tty: false,
            ..tty(vec![])
        };
        assert_eq!(
            term(&plain).as_deref(),
            Some("dumb"),
            "no terminal: the caller's"
        );
    }

    #[test]
    fn no_caller_environment_gives_a_minimal_one() {
        let env = spawn_environment(&SpawnParams::default(), &[]);
        assert_eq!(env[0], ("PATH".into(), FALLBACK_PATH.into()));
        assert!(env.iter().all(|(k, _)| ESSENTIAL.contains(&k.as_str())));
    }
}

//! The environment an agent's command sees.

/// Variables that say who an agent is. A daemon started from inside an agent must not
/// pass its parent's identity on to its own agents.
const IDENTITY_VARS: &[&str] = &[
    "GROVE_AGENT_ID",
    "GROVE_SESSION",
    "GROVE_SOCKET",
    "GROVE_TOKEN",
    "GROVE_WORKTREE",
    "GROVE_BASE",
    "GROVE_NOTIFY_READY",
];

/// Git variables that would point the agent's git at another repository.
const GIT_LOCATION_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
];

pub struct AgentIdentity<'a> {
    pub agent_id: &'a str,
    pub session: &'a str,
    pub socket: &'a str,
    pub token: &'a str,
    pub worktree: &'a str,
    pub base: &'a str,
}

/// The daemon's environment minus grove's own secrets and git location overrides, plus
/// the agent's identity, plus what the user asked for with `--env`.
pub fn agent_environment(
    identity: &AgentIdentity<'_>,
    user: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            !IDENTITY_VARS.contains(&k.as_str())
                && !GIT_LOCATION_VARS.contains(&k.as_str())
                && !k.starts_with("GROVE_TEST_")
        })
        .collect();
    let own = [
        ("GROVE_AGENT_ID", identity.agent_id),
        ("GROVE_SESSION", identity.session),
        ("GROVE_SOCKET", identity.socket),
        ("GROVE_TOKEN", identity.token),
        ("GROVE_WORKTREE", identity.worktree),
        ("GROVE_BASE", identity.base),
    ];
    env.extend(own.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.extend(user.iter().cloned());
    env
}

//! The environment an agent's command sees.

use grove_proto::env::{AGENT_IDENTITY_VARS, GIT_LOCATION_VARS};

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
            !AGENT_IDENTITY_VARS.contains(&k.as_str())
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

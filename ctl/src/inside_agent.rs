//! Whether this `grove` runs inside an agent. An agent never starts grove's daemon: a
//! daemon takes its settings (`GROVE_*`) from the environment it starts in, and an
//! agent's environment is the agent's to choose (`GROVE_JAIL_WRITE=/` would free the
//! next jailed agent). It waits for the user's next command to start one instead.

use crate::exit::Refused;
use grove_proto::paths::Dirs;

/// The agent this process belongs to: the identity the shim gave it, or, whatever the
/// agent unset, the cgroup it cannot leave.
pub fn agent() -> Option<String> {
    let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
    var("GROVE_AGENT_ID")
        .or_else(|| var("GROVE_TOKEN").map(|_| "with a token".to_string()))
        .or_else(grove_sys::cgroup::agent_of_own_cgroup)
}

/// Refuses `what` (starting or replacing the daemon) inside an agent.
pub fn refuse_daemon_start(what: &str) -> Result<(), Refused> {
    match agent() {
        Some(agent) => Err(Refused(format!(
            "{what} is refused inside an agent ({agent}): a daemon started here would take \
             its settings from this agent's environment; run it from your own shell"
        ))),
        None => Ok(()),
    }
}

/// What an agent is told when no daemon answered while it waited.
pub fn no_daemon_for_agent(dirs: &Dirs, agent: &str) -> String {
    format!(
        "no grove daemon answered at {} (agent {agent}); an agent never starts one, \
         since it would take its settings from the agent's environment: the user's next \
         grove command starts it",
        dirs.socket.display()
    )
}

//! Whose a connection is. The peer is pinned when the connection is accepted (a pidfd
//! from `SO_PEERPIDFD`, else its pid and start time), then its cgroup and ancestry are
//! read, and only then is the pin checked again. A peer that is gone by then (a child
//! that connected, handed the socket to its parent over `SCM_RIGHTS` and exited) cannot
//! be placed, and its connection is refused: not knowing whose a connection is never
//! makes it the user's.
//!
//! An agent is recognised first by its cgroup (`<daemon's cgroup>/grove/<id>`, which a
//! jailed agent cannot leave: the jail denies writes to cgroupfs), then by its shim
//! among its ancestors (the shim is a child subreaper, so double forks do not escape).

use crate::core::{CoreHandle, Identity};
use crate::supervisor::procfs;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;
use tokio::net::UnixStream;

/// Why a connection could not be placed; said to the client, then it is closed.
#[derive(Debug)]
pub struct Refusal(pub String);

/// The connecting process, pinned at accept time.
pub struct Pin {
    pid: u32,
    /// Refers to that process for good, whatever happens to its pid.
    pidfd: Option<OwnedFd>,
    started: Option<u64>,
}

impl Pin {
    /// Pins the peer of `stream`; done at once on accept, before it can go away.
    pub fn take(stream: &UnixStream) -> Result<Pin, Refusal> {
        let refuse = |why: String| Refusal(format!("cannot tell which process connected: {why}"));
        let cred = stream.peer_cred().map_err(|e| refuse(e.to_string()))?;
        let pid = cred
            .pid()
            .filter(|&pid| pid > 0)
            .ok_or_else(|| refuse("the kernel gave no peer pid".into()))? as u32;
        // Older kernels (before 6.5) have no SO_PEERPIDFD: pid and start time,
        // checked before and after, stand in for it.
        let pidfd =
            grove_sys::peer::pidfd(stream).map_err(|e| refuse(format!("it is gone ({e})")))?;
        let started = procfs::start_time(pid);
        if pidfd.is_none() && started.is_none() {
            return Err(refuse("it is gone".into()));
        }
        Ok(Pin {
            pid,
            pidfd,
            started,
        })
    }

    /// True while the pinned process has not exited (a zombie has).
    fn still_there(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                // A pidfd becomes readable when its process exits.
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
            }
            None => self
                .started
                .is_some_and(|started| procfs::is_same_process(self.pid, started)),
        }
    }
}

/// What /proc said about the peer.
struct Facts {
    cgroup: Option<String>,
    ancestry: Vec<(u32, Option<u64>)>,
}

fn read_facts(pid: u32) -> Facts {
    Facts {
        cgroup: procfs::cgroup(pid),
        ancestry: ancestry(pid),
    }
}

/// `pid` and its ancestors up to init, each with its start time.
fn ancestry(pid: u32) -> Vec<(u32, Option<u64>)> {
    let mut chain = vec![(pid, procfs::start_time(pid))];
    let mut current = pid;
    while current > 1 && chain.len() < 256 {
        match procfs::parent(current) {
            Some(parent) if parent > 0 && !chain.iter().any(|(p, _)| *p == parent) => {
                chain.push((parent, procfs::start_time(parent)));
                current = parent;
            }
            _ => break,
        }
    }
    chain
}

/// `<the daemon's cgroup>/grove/`, where every agent's cgroup is made; `None` without
/// cgroup v2.
fn agents_cgroup_prefix() -> Option<&'static str> {
    static PREFIX: OnceLock<Option<String>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let own = procfs::cgroup(std::process::id())?;
            Some(format!("{}/grove/", own.trim_end_matches('/')))
        })
        .as_deref()
}

/// The agent id in a cgroup path below `prefix`, if it is an agent's.
fn agent_of_cgroup<'a>(cgroup: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = cgroup.strip_prefix(prefix)?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// The agent the pinned peer belongs to (`None`: the user), or why it cannot be told.
pub async fn place(
    pin: Result<Pin, Refusal>,
    core: &CoreHandle,
) -> Result<Option<Identity>, Refusal> {
    let pin = pin?;
    let (pin, facts) = tokio::task::spawn_blocking(move || {
        let facts = read_facts(pin.pid);
        (pin, facts)
    })
    .await
    .map_err(|e| Refusal(format!("cannot tell which process connected: {e}")))?;
    let unavailable = |_| Refusal("the daemon is shutting down".into());
    let in_cgroup = facts
        .cgroup
        .as_deref()
        .zip(agents_cgroup_prefix())
        .and_then(|(cgroup, prefix)| agent_of_cgroup(cgroup, prefix));
    let placed = match in_cgroup {
        Some(id) => match core.live(id).await.map_err(unavailable)? {
            Some(agent) => Some(agent),
            None => {
                return Err(Refusal(format!(
                    "this connection comes from the cgroup of agent {id}, which is not \
                     running; refused"
                )))
            }
        },
        None => core
            .by_ancestry(facts.ancestry)
            .await
            .map_err(unavailable)?,
    };
    // Checked last: everything read above belonged to the process that connected.
    if !pin.still_there() {
        return Err(Refusal(
            "the process that connected exited before it could be identified; a \
             connection must be used by the process that made it"
                .into(),
        ));
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::agent_of_cgroup;

    #[test]
    fn agent_cgroups_are_found_below_the_daemons() {
        assert_eq!(
            agent_of_cgroup("/grove/1a2b3c4d", "/grove/"),
            Some("1a2b3c4d")
        );
        assert_eq!(
            agent_of_cgroup("/user.slice/grove/1a2b3c4d/inner", "/user.slice/grove/"),
            Some("1a2b3c4d")
        );
        assert_eq!(agent_of_cgroup("/grove/", "/grove/"), None);
        assert_eq!(agent_of_cgroup("/other/grove/1a2b", "/grove/"), None);
    }
}

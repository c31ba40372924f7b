use crate::Error;
use grove_proto::methods::{CgroupProbe, ProbeResult};
use grove_sys::cgroup::AgentCgroup;
use std::sync::atomic::{AtomicU64, Ordering};

/// `daemon.probe`: the subsystems' own probes, run in the daemon, whose cgroup is the
/// one agents' cgroups go below (a shell's may be another). The user's only: it makes
/// and removes a cgroup.
pub async fn handle() -> Result<ProbeResult, Error> {
    Ok(tokio::task::spawn_blocking(|| ProbeResult {
        cgroup: cgroup(),
        jail: crate::jail_probe(),
    })
    .await?)
}

fn cgroup() -> CgroupProbe {
    let mount = grove_sys::proc::cgroup2_mount();
    CgroupProbe {
        read_write: mount.as_ref().is_some_and(|m| m.read_write),
        mount_point: mount.map(|m| m.point),
        daemon_cgroup: grove_sys::proc::own_cgroup(),
        agent_cgroup: agent_cgroup_works(),
    }
}

/// Makes the cgroup an agent would get (the same call as the shim's, which moves a
/// throwaway process into it) and removes it again.
fn agent_cgroup_works() -> bool {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    // Not an agent id (those are hex): no agent's cgroup is touched.
    let name = format!(
        "probe-{}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    );
    match AgentCgroup::create(&name) {
        Some(cgroup) => {
            cgroup.remove();
            true
        }
        None => false,
    }
}

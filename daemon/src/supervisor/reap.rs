//! What a dead shim left behind. A shim killed before its end (SIGKILL, OOM) could not
//! stop its agent's tree: the processes run on in the agent's cgroup, writing into a
//! worktree that is about to be salvaged and removed. They are killed first, all at
//! once (`cgroup.kill`, which no fork outruns), and the cgroup goes once it is empty.

use crate::supervisor::procfs;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The cgroup the shim of `agent_id` made: `<daemon's cgroup>/grove/<id>`.
fn agent_cgroup(agent_id: &str) -> Option<PathBuf> {
    if agent_id.is_empty() || agent_id.contains(['/', '.']) {
        return None;
    }
    let mount = procfs::cgroup2_mount()?;
    let own = procfs::cgroup(std::process::id())?;
    Some(
        mount
            .join(own.trim_start_matches('/'))
            .join("grove")
            .join(agent_id),
    )
}

/// SIGKILLs everything left in the agent's cgroup; true when there was a cgroup.
/// One write: cheap enough for the core's turn, and done before the salvage starts.
pub fn kill_leftovers(agent_id: &str) -> Option<PathBuf> {
    let dir = agent_cgroup(agent_id).filter(|dir| dir.is_dir())?;
    if let Err(e) = fs::write(dir.join("cgroup.kill"), b"1") {
        tracing::warn!(agent = agent_id, error = %e, "cannot kill what is left in the agent's cgroup");
    }
    Some(dir)
}

/// Removes the cgroup once the killed processes are gone (the kernel takes a moment).
pub fn remove_when_empty(dir: PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(&dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) if Instant::now() >= deadline => {
                tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove a dead shim's cgroup");
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    if let Some(parent) = dir.parent() {
        // Fails, as it should, while other agents' cgroups are in it.
        let _ = fs::remove_dir(parent);
    }
}

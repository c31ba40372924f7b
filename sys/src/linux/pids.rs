//! The per-agent process limit (`--max-procs`): `pids.max` of a pids cgroup the tree is
//! born in. cgroup v2 where the agent's cgroup has the pids controller; otherwise the
//! cgroup v1 pids hierarchy where one is mounted and writable (hybrid hosts). A jailed
//! agent cannot leave either: the jail denies writes to cgroupfs.
//!
//! `RLIMIT_NPROC` is no stand-in: it counts every process of the user, not the agent's,
//! and root is exempt from it. Where no pids cgroup can be had, a limit that was asked
//! for is refused rather than silently dropped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A pids cgroup with `pids.max` set, ready for the command to join.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    procs: File,
}

impl PidsCgroup {
    /// Makes `grove/<agent_id>` in a pids hierarchy with `pids.max = max`.
    pub fn create(agent_id: &str, max: u64) -> Result<PidsCgroup, String> {
        let base = pids_base().ok_or_else(why_unavailable)?;
        let dir = base.join("grove").join(agent_id);
        fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the pids cgroup {}: {e}", dir.display()))?;
        let made = write_file(&dir.join("pids.max"), &max.to_string()).and_then(|()| {
            OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        });
        match made {
            Ok(procs) => Ok(PidsCgroup { dir, procs }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(format!(
                    "cannot set up the pids cgroup {}: {e}",
                    dir.display()
                ))
            }
        }
    }

    /// An open `cgroup.procs` for the forked child to join through.
    pub fn joiner(&self) -> io::Result<File> {
        self.procs.try_clone()
    }

    /// Removes the cgroup once the tree is gone.
    pub fn remove(self) {
        super::cgroup::remove_when_empty(&self.dir);
    }
}

/// True when a process limit can be enforced here: the v1 pids hierarchy, or a cgroup
/// v2 whose agents' cgroups can get the pids controller.
pub fn available() -> bool {
    pids_base().is_some() || super::cgroup::v2_delegates("pids")
}

/// Says why no limit can be enforced, for the refusal.
pub fn why_unavailable() -> String {
    "cannot limit the number of processes here: no writable pids cgroup (a cgroup v2 \
     with the pids controller delegated, or a mounted cgroup v1 pids hierarchy)"
        .into()
}

/// Where agents' pids cgroups go: the v1 pids hierarchy at this process's own place in
/// it, when that is writable. (With cgroup v2 the agent's own cgroup takes the limit
/// when the pids controller is delegated: `AgentCgroup::limit_pids`.)
fn pids_base() -> Option<PathBuf> {
    let mount = super::proc::v1_mount("pids")?.point;
    let relative = super::proc::own_v1_cgroup("pids")?;
    let base = mount.join(relative.trim_start_matches('/'));
    let probe = base.join("grove");
    match fs::create_dir(&probe) {
        Ok(()) => Some(base),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(base),
        Err(_) => None,
    }
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

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
        crate::cgroup::remove_when_empty(&self.dir);
    }
}

/// True when a process limit can be enforced here: the v1 pids hierarchy, or a cgroup
/// v2 whose agents' cgroups can get the pids controller.
pub fn available() -> bool {
    pids_base().is_some() || crate::cgroup::v2_delegates("pids")
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
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(v1_pids_mount)?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| path.trim().to_string())
    })?;
    let base = mount.join(relative.trim_start_matches('/'));
    let probe = base.join("grove");
    match fs::create_dir(&probe) {
        Ok(()) => Some(base),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(base),
        Err(_) => None,
    }
}

/// The mount point of a mountinfo line when it is the cgroup v1 pids hierarchy.
fn v1_pids_mount(line: &str) -> Option<PathBuf> {
    let (before, after) = line.split_once(" - ")?;
    let mut fields = after.split_whitespace();
    if fields.next()? != "cgroup" {
        return None;
    }
    let options = fields.nth(1)?;
    if !options.split(',').any(|o| o == "pids") {
        return None;
    }
    Some(PathBuf::from(before.split_whitespace().nth(4)?))
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::v1_pids_mount;
    use std::path::PathBuf;

    #[test]
    fn finds_the_v1_pids_hierarchy() {
        let pids = "35 25 0:31 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids";
        assert_eq!(
            v1_pids_mount(pids),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        let cpu = "36 25 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu";
        assert_eq!(v1_pids_mount(cpu), None);
        let v2 = "37 25 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw";
        assert_eq!(v1_pids_mount(v2), None);
    }
}

//! A cgroup v2 of the agent's own, where the kernel offers a writable one.
//!
//! The cgroup is `grove/<agent-id>` below the shim's own cgroup (or below the root of
//! the cgroup2 mount when the shim's cannot be found). No controller is enabled: the
//! cgroup is only a tight bag around the tree, for `cgroup.kill` (which no fork can
//! outrun) and for accounting (`cpu.stat` always; `memory.peak` when the memory
//! controller happens to be on). The command is born inside (clone3, see
//! [`super::clone_into`]), or, where the kernel cannot do that, joins it between fork
//! and exec; either way every descendant is inside from its first instruction.
//! Anything that goes wrong means no cgroup: the shim then relies on the /proc walk
//! alone, as it always can.

use super::clone_into;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use crate::types::Usage;

#[derive(Debug)]
pub struct AgentCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened for writing by the shim so that the child can join with
    /// one write(2) before exec (close-on-exec: the agent never holds it).
    procs: File,
    /// The directory itself, which clone3 takes to start a child inside.
    dir_fd: OwnedFd,
    /// Whether children can be born inside (clone3), or must join after fork.
    born_inside: bool,
}

impl AgentCgroup {
    /// Creates the agent's cgroup and checks that a process can really be moved into
    /// it; `None` when it cannot (no cgroup2 mount, not writable, not delegated). The
    /// agent's log stays the agent's: a missing cgroup is not worth a line in it.
    pub fn create(agent_id: &str) -> Option<AgentCgroup> {
        Self::create_in(&base_dir()?, agent_id).ok()
    }

    fn create_in(base: &Path, agent_id: &str) -> io::Result<AgentCgroup> {
        let parent = base.join("grove");
        let dir = parent.join(agent_id);
        // Another shim may remove an empty `grove` between our two mkdirs: try again.
        let mut attempts = 0;
        loop {
            match fs::create_dir_all(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 5 => attempts += 1,
                Err(e) => return Err(e),
            }
        }
        let checked = Self::open(&dir).and_then(|mut cgroup| {
            cgroup.born_inside = cgroup.probe()?;
            Ok(cgroup)
        });
        if checked.is_err() {
            let _ = fs::remove_dir(&dir);
        }
        checked
    }

    fn open(dir: &Path) -> io::Result<AgentCgroup> {
        Ok(AgentCgroup {
            dir: dir.to_path_buf(),
            procs: OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?,
            dir_fd: File::open(dir)?.into(),
            born_inside: false,
        })
    }

    /// Starts a throwaway child inside the cgroup, so that a cgroup the kernel will not
    /// let us use is found out here, not in the agent's start. True when children can
    /// be born inside; false when they must join: clone3 failed (a kernel before 5.7,
    /// a seccomp filter that refuses clone3, as container runtimes' defaults did) and
    /// the old way works, or a test asked for the old way.
    fn probe(&self) -> io::Result<bool> {
        if born_inside_wanted() {
            // SAFETY: the child only calls _exit, which is async-signal-safe.
            match unsafe { clone_into::fork_into(self.dir_fd.as_fd()) } {
                // SAFETY: ends the child without running the parent's destructors.
                Ok(None) => unsafe { libc::_exit(0) },
                Ok(Some(child)) => {
                    let _ = clone_into::reap(child);
                    return Ok(true);
                }
                // Whatever refused clone3, joining gives the verdict.
                Err(_) => {}
            }
        }
        self.probe_join().map(|()| false)
    }

    /// True when [`AgentCgroup::spawn_inside`] starts children here; otherwise they
    /// join through [`AgentCgroup::joiner`].
    pub fn born_inside(&self) -> bool {
        self.born_inside
    }

    /// Starts `command` inside the cgroup (see [`clone_into::spawn_into`]: from a
    /// single-threaded process only); only when [`AgentCgroup::born_inside`].
    pub fn spawn_inside(&self, command: &mut Command) -> io::Result<u32> {
        let pid = clone_into::spawn_into(self.dir_fd.as_fd(), command)?;
        Ok(pid.as_raw() as u32)
    }

    /// The cgroup's directory for clone3 to start a child inside, where children can
    /// be born inside ([`AgentCgroup::born_inside`]).
    pub fn birth_fd(&self) -> Option<BorrowedFd<'_>> {
        self.born_inside.then(|| self.dir_fd.as_fd())
    }

    /// Moves a throwaway child into the cgroup: the probe where children must join.
    fn probe_join(&self) -> io::Result<()> {
        use nix::sys::wait::WaitStatus;
        use nix::unistd::{fork, ForkResult};
        // SAFETY: the child only calls async-signal-safe functions (write, _exit), as a
        // child of a multi-threaded process (the daemon's `daemon.probe`) must.
        match unsafe { fork() }? {
            ForkResult::Child => {
                let code = match self.join() {
                    Ok(()) => 0,
                    Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
                };
                // SAFETY: _exit ends the child without running the parent's destructors.
                unsafe { libc::_exit(code) }
            }
            ForkResult::Parent { child } => match clone_into::reap(child)? {
                WaitStatus::Exited(_, 0) => Ok(()),
                WaitStatus::Exited(_, errno) => Err(io::Error::from_raw_os_error(errno)),
                _ => Err(io::Error::other("the probe process died")),
            },
        }
    }

    /// Moves the calling process into the cgroup (async-signal-safe).
    fn join(&self) -> io::Result<()> {
        join_through(&self.procs)
    }

    /// A handle the forked child can join through, owned by the `pre_exec` closure.
    pub fn joiner(&self) -> io::Result<Joiner> {
        Ok(Joiner(self.procs.try_clone()?))
    }

    /// SIGKILLs every process in the cgroup at once (`cgroup.kill`, Linux 5.14+).
    /// False when the kernel has no `cgroup.kill`.
    pub fn kill_all(&self) -> bool {
        OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"))
            .is_ok()
    }

    /// Sets `pids.max`, enabling the pids controller for agents' cgroups first. Fails
    /// where the cgroup above does not delegate it (then the v1 hierarchy may serve).
    pub fn limit_pids(&self, max: u64) -> io::Result<()> {
        if let Some(parent) = self.dir.parent() {
            let _ = OpenOptions::new()
                .write(true)
                .open(parent.join("cgroup.subtree_control"))
                .and_then(|mut f| f.write_all(b"+pids"));
        }
        OpenOptions::new()
            .write(true)
            .open(self.dir.join("pids.max"))?
            .write_all(max.to_string().as_bytes())
    }

    /// CPU time and, where the memory controller is on, peak memory of the tree.
    pub fn usage(&self) -> Usage {
        let cpu_usec = fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|text| stat_field(&text, "usage_usec"));
        let peak_memory_bytes = fs::read_to_string(self.dir.join("memory.peak"))
            .ok()
            .and_then(|text| text.trim().parse().ok());
        Usage {
            cpu_usec,
            peak_memory_bytes,
        }
    }

    /// Removes the cgroup once it is empty (the kernel may take a moment after the last
    /// process is reaped), and `grove/` above it when no other agent uses it.
    pub fn remove(self) {
        remove_when_empty(&self.dir);
    }
}

/// Removes a cgroup directory once the kernel lets go of it, and its parent (`grove/`)
/// when no other agent uses it.
pub fn remove_when_empty(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) if Instant::now() >= deadline => {
                eprintln!("grove: cannot remove the cgroup {}: {e}", dir.display());
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    if let Some(parent) = dir.parent() {
        // Fails (as it should) while other agents' cgroups are in it.
        let _ = fs::remove_dir(parent);
    }
}

/// For the daemon, whose cgroup the shims share: SIGKILLs everything left in the cgroup
/// of an agent whose shim died before its end (`cgroup.kill`, which no fork outruns), so
/// that nothing writes into a worktree about to be salvaged. Returns the cgroup, for
/// [`remove_when_empty`] once the kernel lets go of it; `None` when there is none (the
/// shim cleaned up); an error when the kill could not be written.
pub fn kill_stale_cgroup(agent_id: &str) -> io::Result<Option<PathBuf>> {
    if agent_id.is_empty() || agent_id.contains(['/', '.']) {
        return Ok(None);
    }
    let Some(dir) = base_dir()
        .map(|base| base.join("grove").join(agent_id))
        .filter(|dir| dir.is_dir())
    else {
        return Ok(None);
    };
    fs::write(dir.join("cgroup.kill"), b"1")?;
    Ok(Some(dir))
}

/// The cgroup of agent `agent_id`, when it has one (seen from the daemon, whose cgroup
/// the shims share).
fn agent_dir(agent_id: &str) -> Option<PathBuf> {
    if agent_id.is_empty() || agent_id.contains(['/', '.']) {
        return None;
    }
    base_dir()
        .map(|base| base.join("grove").join(agent_id))
        .filter(|dir| dir.join("cgroup.freeze").is_file())
}

/// Freezes (or thaws) the agent's whole tree with the cgroup v2 freezer, which no fork
/// outruns, and waits until the kernel reports it done. `Ok(false)`: the agent has no
/// cgroup (the caller stops the tree with signals instead).
pub fn freeze(agent_id: &str, frozen: bool) -> io::Result<bool> {
    let Some(dir) = agent_dir(agent_id) else {
        return Ok(false);
    };
    fs::write(dir.join("cgroup.freeze"), if frozen { b"1" } else { b"0" })?;
    // `frozen` in cgroup.events turns once every task has stopped; usually at once.
    let want = if frozen { "frozen 1" } else { "frozen 0" };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let events = fs::read_to_string(dir.join("cgroup.events"))?;
        if events.lines().any(|l| l.trim() == want) {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} did not report `{want}` within 5 s", dir.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the agent's cgroup is frozen (`cgroup.freeze`, as asked); `None` without one.
pub fn is_frozen(agent_id: &str) -> Option<bool> {
    let text = fs::read_to_string(agent_dir(agent_id)?.join("cgroup.freeze")).ok()?;
    Some(text.trim() == "1")
}

/// Where agents' cgroups go: below the caller's own cgroup, else the mount's root.
pub(crate) fn base_dir() -> Option<PathBuf> {
    let mount = cgroup2_mount()?;
    Some(
        own_cgroup()
            .map(|relative| mount.join(relative.trim_start_matches('/')))
            .filter(|dir| dir.is_dir())
            .unwrap_or(mount),
    )
}

/// True when agents' cgroups can be made here (a writable cgroup2 below this
/// process's own cgroup, or the mount's root).
pub fn usable() -> bool {
    let Some(base) = base_dir() else {
        return false;
    };
    let grove = base.join("grove");
    match fs::create_dir(&grove) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => true,
        Err(_) => false,
    }
}

/// True when `controller` is available to agents' cgroups: the cgroup above `grove/`
/// enables it for its children, so `grove/` can pass it on.
pub(crate) fn v2_delegates(controller: &str) -> bool {
    base_dir()
        .and_then(|base| fs::read_to_string(base.join("cgroup.subtree_control")).ok())
        .is_some_and(|text| text.split_whitespace().any(|c| c == controller))
}

/// An open `cgroup.procs` of an agent's cgroup (close-on-exec).
#[derive(Debug)]
pub struct Joiner(File);

impl Joiner {
    /// Moves the calling process into the cgroup. Async-signal-safe: for `pre_exec`.
    pub fn join(&self) -> io::Result<()> {
        join_through(&self.0)
    }
}

/// Writes "0" (the writer itself) to an open `cgroup.procs`: one write(2), nothing more.
pub fn join_through(procs: &File) -> io::Result<()> {
    nix::unistd::write(procs, b"0\n")?;
    Ok(())
}

/// The value of `key` in a flat-keyed file such as `cpu.stat`.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Whether to try starting children inside the cgroup; tests of the other way (that
/// of kernels before 5.7) turn it off with [`crate::TEST_CGROUP_BY_JOINING`].
fn born_inside_wanted() -> bool {
    #[cfg(all(feature = "test-hooks", debug_assertions))]
    if std::env::var_os(crate::TEST_CGROUP_BY_JOINING).is_some() {
        return false;
    }
    true
}

/// Where the cgroup2 hierarchy is mounted.
fn cgroup2_mount() -> Option<PathBuf> {
    super::proc::cgroup2_mount().map(|m| m.point)
}

/// The agent whose cgroup (`.../grove/<agent-id>`) this process is in, if any. A
/// process cannot leave that cgroup unless it may write the cgroup above, which a
/// jailed agent may not: unlike its environment, this says "agent" whatever it unset.
pub fn agent_of_own_cgroup() -> Option<String> {
    agent_in_path(&own_cgroup()?)
}

fn agent_in_path(cgroup: &str) -> Option<String> {
    let (_, below) = cgroup.split_once("/grove/")?;
    let agent = below.split('/').next()?;
    (!agent.is_empty()).then(|| agent.to_string())
}

/// The shim's own cgroup v2 path.
fn own_cgroup() -> Option<String> {
    super::proc::own_cgroup()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_usage_usec_from_cpu_stat() {
        let text = "usage_usec 1310851\nuser_usec 1132686\nsystem_usec 178164\n";
        assert_eq!(stat_field(text, "usage_usec"), Some(1_310_851));
        assert_eq!(stat_field(text, "user"), None);
    }

    #[test]
    fn an_agent_is_named_by_the_level_below_grove() {
        assert_eq!(
            agent_in_path("/user.slice/grove/ab12/sub").as_deref(),
            Some("ab12")
        );
        assert_eq!(agent_in_path("/user.slice/grove.service"), None);
        assert_eq!(agent_in_path("/x/grove/"), None);
    }
}

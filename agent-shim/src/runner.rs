//! How the agent's command is started: the seam where a runner plugs in.
//!
//! - **plain**: a child of the shim (born inside its cgroup where the kernel can);
//! - **jailed**: the first process of namespaces of its own (`grove_sys::view`), which
//!   see only the paths the daemon chose and only the agent's own processes, with the
//!   Landlock write jail entered just before exec.
//!
//! A container or a remote runner joins here: whatever starts the command returns a
//! [`Running`] that the shim supervises and asks for the outcome.

use crate::cgroup::AgentCgroup;
use crate::ViewEntry;
use nix::unistd::Pid;
use std::io;
use std::process::Command;
use std::time::Duration;

/// The runner an agent's spec asks for.
pub enum Runner<'a> {
    Plain,
    Jailed {
        view: &'a [ViewEntry],
        grace: Duration,
    },
}

/// A started command: the process the shim waits for.
pub struct Running {
    /// The shim's child: the command itself, or the jail's init.
    pub pid: Pid,
    jailed: Option<grove_sys::view::Started>,
}

impl Running {
    /// How the command ended, given how the shim's child did: `(code, signal)`.
    pub fn outcome(&self, child: (Option<i32>, Option<i32>)) -> (Option<i32>, Option<i32>) {
        use grove_sys::view::Ended;
        match self.jailed.as_ref().map(|started| started.agent_status()) {
            None => child,
            Some(Some(Ended::Exited(code))) => (Some(code), None),
            Some(Some(Ended::Signaled(signal))) => (None, Some(signal)),
            // Init was killed before it could say: the tree was killed with it.
            Some(None) => (None, Some(libc::SIGKILL)),
        }
    }
}

impl Runner<'_> {
    /// Starts `command` in `cgroup` (born inside where it can; otherwise its `pre_exec`
    /// joins).
    pub fn start(
        &self,
        command: &mut Command,
        cgroup: Option<&AgentCgroup>,
    ) -> io::Result<Running> {
        match self {
            Runner::Plain => {
                let pid = match cgroup.filter(|c| c.born_inside()) {
                    // The shim starts no thread (and `grove __shim` runs it before
                    // anything else), as this needs.
                    Some(cgroup) => cgroup.spawn_inside(command)?,
                    None => command.spawn()?.id(),
                };
                Ok(Running {
                    pid: Pid::from_raw(pid as i32),
                    jailed: None,
                })
            }
            Runner::Jailed { view, grace } => {
                let view = grove_sys::view::View {
                    entries: view.iter().map(ViewEntry::to_sys).collect(),
                };
                let started = grove_sys::view::spawn(
                    &view,
                    cgroup.and_then(AgentCgroup::birth_fd),
                    *grace,
                    command,
                )?;
                Ok(Running {
                    pid: started.init,
                    jailed: Some(started),
                })
            }
        }
    }
}

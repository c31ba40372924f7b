//! Pausing and resuming an agent: its whole process tree frozen with the cgroup v2
//! freezer, or, where the agent has no cgroup, stopped with SIGSTOP (and continued with
//! SIGCONT) process by process. The shim itself is never stopped: it keeps enforcing
//! the timeout, which counts wall-clock time, paused time included.

use super::Core;
use crate::error::Error;
use crate::supervisor::procfs;
use grove_proto::types::{AgentRecord, AgentStatus};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};

impl Core {
    /// Freezes (`frozen`) or thaws a running agent's tree.
    pub(super) async fn pause(&mut self, prefix: &str, frozen: bool) -> Result<AgentRecord, Error> {
        let row = self.resolve(prefix)?;
        let id = row.record.id.clone();
        let (from, verb) = if frozen {
            (AgentStatus::Running, "pause")
        } else {
            (AgentStatus::Paused, "resume")
        };
        if row.record.status != from {
            return Err(Error::InvalidState(format!(
                "agent {id} is {}, so there is nothing to {verb}: only a {} agent can be",
                row.record.status_text(),
                from.as_str()
            )));
        }
        let (Some(pid), Some(started)) = (row.record.pid, row.pid_start) else {
            return Err(Error::Inconsistent {
                id: id.to_string(),
                what: "has no recorded process",
            });
        };
        if !procfs::is_same_process(pid, started) {
            return Err(Error::InvalidState(format!(
                "agent {id} has just ended; nothing to {verb}"
            )));
        }
        let owned = id.clone();
        tokio::task::spawn_blocking(move || freeze_tree(&owned, pid, frozen)).await??;
        let record = self.set_paused(&id, frozen).await?;
        self.publish(
            if frozen {
                "agent.paused"
            } else {
                "agent.resumed"
            },
            &record,
        );
        tracing::info!(agent = %id, frozen, "agent {verb}d");
        Ok(record)
    }

    /// Thaws a paused agent before it is stopped: a frozen tree would hold a SIGTERM
    /// pending until the grace period ran out.
    pub(super) async fn thaw_for_kill(&mut self, id: &str) -> Result<(), Error> {
        let Some(pid) = self.agents.get(id).and_then(|row| row.record.pid) else {
            return Ok(());
        };
        let owned = id.to_string();
        tokio::task::spawn_blocking(move || freeze_tree(&owned, pid, false)).await??;
        let record = self.set_paused(id, false).await?;
        self.publish("agent.resumed", &record);
        Ok(())
    }

    async fn set_paused(&mut self, id: &str, frozen: bool) -> Result<AgentRecord, Error> {
        let row = self
            .agents
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} vanished")))?;
        row.record.status = if frozen {
            AgentStatus::Paused
        } else {
            AgentStatus::Running
        };
        let record = row.record.clone();
        self.persist(id).await;
        Ok(record)
    }

    /// At start-up, an adopted agent's status follows its cgroup's freezer (which a
    /// `grove resume` while no daemon ran, or a crash mid-pause, may have changed).
    pub(super) fn recover_paused(&mut self, id: &str) -> bool {
        let Some(frozen) = grove_sys::cgroup::is_frozen(id) else {
            return false;
        };
        let Some(row) = self.agents.get_mut(id) else {
            return false;
        };
        let status = if frozen {
            AgentStatus::Paused
        } else {
            AgentStatus::Running
        };
        let changed = row.record.status != status;
        row.record.status = status;
        changed
    }
}

/// Freezes or thaws the tree below the shim `shim_pid`: the cgroup freezer where the
/// agent has a cgroup, else signals to every descendant of the shim.
fn freeze_tree(id: &str, shim_pid: u32, frozen: bool) -> Result<(), Error> {
    match grove_sys::cgroup::freeze(id, frozen) {
        Ok(true) => Ok(()),
        Ok(false) => {
            signal_tree(
                shim_pid,
                if frozen {
                    Signal::SIGSTOP
                } else {
                    Signal::SIGCONT
                },
            );
            Ok(())
        }
        Err(source) => Err(Error::Freeze {
            id: id.to_string(),
            action: if frozen { "freeze" } else { "thaw" },
            source,
        }),
    }
}

/// Signals every descendant of `root` (not `root`). A process forked while the walk
/// runs is caught by the next pass; passes stop once one finds nobody new.
fn signal_tree(root: u32, signal: Signal) {
    let mut done: HashSet<u32> = HashSet::new();
    for _ in 0..5 {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (pid, stat) in grove_sys::proc::table() {
            if !stat.zombie {
                children.entry(stat.parent).or_default().push(pid);
            }
        }
        let mut fresh = 0;
        let mut stack = vec![root];
        while let Some(pid) = stack.pop() {
            for &child in children.get(&pid).into_iter().flatten() {
                stack.push(child);
                if done.insert(child) {
                    fresh += 1;
                    let _ = kill(Pid::from_raw(child as i32), signal);
                }
            }
        }
        if fresh == 0 {
            break;
        }
    }
}

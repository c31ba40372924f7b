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

/// A freeze or thaw running in the background, by agent.
#[derive(Default)]
pub(super) struct Freezing {
    /// Freezing (`true`) or thawing.
    frozen: bool,
    /// The agent was told to stop meanwhile: a freeze that lands is thawed at once, so
    /// that the stop is not held up by a frozen tree.
    stopping: bool,
}

/// An agent's shim: its pid and start time, so that a reused pid is never taken for it.
#[derive(Clone, Copy)]
pub(super) struct Shim {
    pid: u32,
    started: u64,
}

fn ended_meanwhile(id: &str, frozen: bool) -> Error {
    Error::InvalidState(format!(
        "agent {id} ended while it was being {}",
        if frozen { "paused" } else { "resumed" }
    ))
}

/// A freeze or thaw done, back on the core's turn; `reply` is the pause or resume that
/// asked for it (none: a thaw before a kill).
pub struct Froze {
    pub(super) id: String,
    pub(super) frozen: bool,
    pub(super) result: Result<(), Error>,
    pub(super) reply: Option<super::Reply<AgentRecord>>,
}

impl Core {
    /// Freezes (`frozen`) or thaws a running agent's tree. The freezer can take seconds
    /// (the kernel waits for each task to reach a safe point), so it runs in the
    /// background and the core serves everyone else meanwhile; [`Core::froze`] answers.
    pub(super) fn pause(&mut self, prefix: &str, frozen: bool, reply: super::Reply<AgentRecord>) {
        match self.check_pause(prefix, frozen) {
            Ok((id, shim)) => self.freeze_in_background(id, shim, frozen, Some(reply)),
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The agent and its shim's pid, if `prefix` names an agent that can be frozen
    /// (`frozen`) or thawed now.
    fn check_pause(&self, prefix: &str, frozen: bool) -> Result<(String, Shim), Error> {
        let row = self.resolve(prefix)?;
        let id = row.record.id.clone();
        let (from, verb) = if frozen {
            (AgentStatus::Running, "pause")
        } else {
            (AgentStatus::Paused, "resume")
        };
        if let Some(busy) = self.freezing.get(&id) {
            return Err(Error::InvalidState(format!(
                "agent {id} is being {} already; try again once that is done",
                if busy.frozen { "paused" } else { "resumed" }
            )));
        }
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
        Ok((id, Shim { pid, started }))
    }

    fn freeze_in_background(
        &mut self,
        id: String,
        shim: Shim,
        frozen: bool,
        reply: Option<super::Reply<AgentRecord>>,
    ) {
        self.freezing.insert(
            id.clone(),
            Freezing {
                frozen,
                stopping: false,
            },
        );
        let tx = self.tx.clone();
        tokio::spawn(async move {
            crate::faults::hold("freezing").await;
            let owned = id.clone();
            let result = tokio::task::spawn_blocking(move || {
                // Never signal a pid that now belongs to someone else.
                if !procfs::is_same_process(shim.pid, shim.started) {
                    return Err(ended_meanwhile(&owned, frozen));
                }
                freeze_tree(&owned, shim.pid, frozen)
            })
            .await
            .map_err(Error::from)
            .and_then(|frozen| frozen);
            let froze = Froze {
                id,
                frozen,
                result,
                reply,
            };
            let _ = tx.send(super::Msg::Froze(Box::new(froze))).await;
        });
    }

    /// A freeze or thaw is done: the agent's status follows, unless it ended meanwhile.
    pub(super) async fn froze(&mut self, froze: Froze) {
        let Froze {
            id,
            frozen,
            result,
            reply,
        } = froze;
        let stopping = self.freezing.remove(&id).is_some_and(|f| f.stopping);
        let answer = match result {
            Err(e) => Err(e),
            Ok(()) => self.after_freeze(&id, frozen, stopping).await,
        };
        if let Some(reply) = reply {
            let _ = reply.send(answer);
        }
    }

    async fn after_freeze(
        &mut self,
        id: &str,
        frozen: bool,
        stopping: bool,
    ) -> Result<AgentRecord, Error> {
        let expected = if frozen {
            AgentStatus::Running
        } else {
            AgentStatus::Paused
        };
        let status = self.agents.get(id).map(|row| row.record.status);
        if status != Some(expected) {
            return Err(ended_meanwhile(id, frozen));
        }
        if frozen && stopping {
            self.thaw_for_kill(id);
            return Err(Error::InvalidState(format!(
                "agent {id} was told to stop while it was being paused; it stops instead"
            )));
        }
        let record = self.set_paused(id, frozen).await?;
        let (event, verb) = if frozen {
            ("agent.paused", "paused")
        } else {
            ("agent.resumed", "resumed")
        };
        self.publish(event, &record);
        tracing::info!(agent = %id, frozen, "agent {verb}");
        Ok(record)
    }

    /// Thaws an agent that is told to stop, in the background: a frozen tree would hold
    /// a SIGTERM pending until the grace period ran out. A freeze still under way is
    /// thawed once it lands.
    pub(super) fn thaw_for_kill(&mut self, id: &str) {
        if let Some(freezing) = self.freezing.get_mut(id) {
            freezing.stopping = true;
            return;
        }
        let paused = self
            .agents
            .get(id)
            .filter(|row| row.record.status == AgentStatus::Paused);
        if let Some((Some(pid), Some(started))) = paused.map(|row| (row.record.pid, row.pid_start))
        {
            self.freeze_in_background(id.to_string(), Shim { pid, started }, false, None);
        }
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
        self.persist(id).await?;
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

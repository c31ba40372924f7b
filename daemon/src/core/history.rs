//! Finished agents' records come after the daemon is ready. At start the core holds
//! only the live agents (what adoption and admission need); the finished ones, which
//! grow with every agent ever run (100,000 records took 0.9 s to read and parse),
//! are read in batches in the background and fed to the core by message. Until the
//! last batch is in, a request that could be about a finished agent (any id or name,
//! `list --all`, the start-up scan's list of worktrees) waits in order; the live list,
//! the queue and the agents' own lifecycle go on at once.

use super::{Core, Listed, Msg};
use crate::db::agents::{self, AgentRow};
use crate::db::Db;
use crate::error::Error;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Finished agents' rows, each with its listed text.
pub(super) type Finished = Vec<(AgentRow, Listed)>;

/// Rows read per trip to the database thread, so its other work waits for one batch
/// at most.
const BATCH: usize = 2_000;

pub(super) enum History {
    /// Still reading: the requests that need it, in the order they came.
    Loading(VecDeque<Msg>),
    Loaded,
    /// A record could not be read: requests that need the finished agents get this.
    Failed(Arc<Error>),
}

/// Reads the finished agents' rows and sends them to the core: `Msg::History` with
/// each batch, then with `None` (or the error that stopped the reading).
pub(super) async fn load(db: Db, core: mpsc::Sender<Msg>) {
    let mut after = String::new();
    loop {
        let from = after.clone();
        let batch = db
            .call(move |conn| agents::load_finished(conn, &from, BATCH))
            .await
            .map_err(Error::from);
        let done = match &batch {
            Ok(rows) => match rows.last() {
                Some(last) => {
                    after.clone_from(&last.record.id);
                    false
                }
                None => true,
            },
            Err(_) => true,
        };
        let msg = match batch {
            Ok(rows) if rows.is_empty() => Ok(None),
            // Written here, not on the core's turn: the first long list after a start
            // spent 0.3 s of the core's time writing 100,000 records.
            Ok(rows) => Ok(Some(
                rows.into_iter()
                    .map(|row| {
                        let row = super::ask::still_asking(row);
                        let listed = Listed::of(&row.record);
                        (row, listed)
                    })
                    .collect(),
            )),
            Err(e) => Err(e),
        };
        if core.send(Msg::History(msg)).await.is_err() || done {
            return;
        }
    }
}

impl Msg {
    /// Whether answering this could depend on a finished agent's record.
    fn needs_history(&self) -> bool {
        match self {
            Msg::List(page, _) => page.all || page.within.is_some(),
            Msg::Spawn(..)
            | Msg::Respawn(..)
            | Msg::Get(..)
            | Msg::Wait(..)
            | Msg::Kill(..)
            | Msg::Pause(..)
            | Msg::RemoveKept(..)
            | Msg::Discard(..)
            | Msg::Merged(..)
            | Msg::Forget(..)
            | Msg::Snapshot(..)
            | Msg::CountByStatus(..)
            | Msg::SessionAgents(..)
            | Msg::Worktrees(..)
            | Msg::Report(..)
            | Msg::Answer { .. }
            | Msg::Restore(..) => true,
            _ => false,
        }
    }

    /// Answers a request that needs the finished agents with why they are missing.
    fn refuse(self, why: &Arc<Error>) {
        fn e<T>(why: &Arc<Error>) -> Result<T, Error> {
            Err(Error::HistoryUnreadable(Arc::clone(why)))
        }
        let _ = match self {
            Msg::Spawn(_, r) => r.send(e(why)).is_ok(),
            Msg::Respawn(_, r) => r.send(e(why)).is_ok(),
            Msg::Get(_, _, r) | Msg::Kill(_, r) | Msg::Pause(_, _, r) => r.send(e(why)).is_ok(),
            Msg::RemoveKept(_, _, r) | Msg::Report(_, _, r) | Msg::Merged(_, r) => {
                r.send(e(why)).is_ok()
            }
            Msg::Restore(_, _, r) => r.send(e(why)).is_ok(),
            Msg::List(_, r) => r.send(e(why)).is_ok(),
            Msg::Wait(_, r) => r.send(e(why)).is_ok(),
            Msg::Discard(_, r) => r.send(e(why)).is_ok(),
            Msg::Forget(_, _, r) => r.send(e(why)).is_ok(),
            Msg::Snapshot(r) => r.send(e(why)).is_ok(),
            Msg::CountByStatus(r) => r.send(e(why)).is_ok(),
            Msg::SessionAgents(_, r) => r.send(e(why)).is_ok(),
            Msg::Worktrees(r) => r.send(e(why)).is_ok(),
            Msg::ByToken(_, r) => r.send(e(why)).is_ok(),
            Msg::Answer { reply, .. } => reply.send(e(why)).is_ok(),
            _ => false,
        };
    }
}

impl Core {
    /// `msg` back when it can be handled now; otherwise it waits for the history (or is
    /// refused, when the history could not be read).
    pub(super) fn unless_waiting_for_history(&mut self, msg: Msg) -> Option<Msg> {
        if !msg.needs_history() {
            return Some(msg);
        }
        self.defer(msg)
    }

    /// As [`Core::unless_waiting_for_history`], for a message that turned out to need the history.
    pub(super) fn defer(&mut self, msg: Msg) -> Option<Msg> {
        match &mut self.history {
            History::Loaded => Some(msg),
            History::Failed(why) => {
                msg.refuse(why);
                None
            }
            History::Loading(waiting) => {
                waiting.push_back(msg);
                None
            }
        }
    }

    pub(super) fn history_loading(&self) -> bool {
        matches!(self.history, History::Loading(_))
    }

    /// A batch of finished rows, or the end of them.
    pub(super) fn history_batch(&mut self, batch: Result<Option<Finished>, Error>) {
        match batch {
            Ok(Some(rows)) => {
                for (row, listed) in rows {
                    // A row the core has is newer: the agent finished since the start.
                    if !self.agents.contains_key(&row.record.id) {
                        self.agents.insert_listed(row, Some(listed));
                    }
                }
            }
            Ok(None) => {
                tracing::info!(agents = self.agents.len(), "finished agents' records read");
                if let History::Loading(waiting) =
                    std::mem::replace(&mut self.history, History::Loaded)
                {
                    self.replay = waiting;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the finished agents' records; requests about them are refused");
                let why = Arc::new(e);
                if let History::Loading(waiting) =
                    std::mem::replace(&mut self.history, History::Failed(Arc::clone(&why)))
                {
                    waiting.into_iter().for_each(|msg| msg.refuse(&why));
                }
            }
        }
    }
}

//! Sessions' lifecycle: active while an agent of it is live or it was written lately,
//! then idle, suspended (its head leaves memory), archived, and at last deleted with
//! an audit row. A pass every `session_gc_interval` moves sessions along; any read or
//! write makes a session active again. At most `session_cache` heads stay in memory.
//!
//! An agent of a session is activity in it: while it runs, and until it ends, the
//! session counts as used (state-semantics.md, 26 to 28). The pass stores that in the
//! session's last use, so the clock survives a restart and the agent's record.

use super::session::Lifecycle;
use super::{store, StateHandle, StateService};
use crate::config::SessionLifecycle;
use crate::error::Error;
use grove_proto::now_ms;
use grove_proto::types::AgentRecord;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    pub moved: u64,
    pub deleted: Vec<String>,
}

/// The agents of one session, as the pass sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Activity {
    /// One of them is not final (queued, running, paused...).
    pub live: bool,
    /// The latest of them: now while one is live, else when the last one ended.
    pub at_ms: u64,
}

/// Per session, what its agents on record did.
pub type AgentActivity = HashMap<String, Activity>;

/// One lifecycle change, as `session.lifecycle` subscribers see it.
#[derive(Debug, Clone, Serialize)]
struct Transition<'a> {
    session: &'a str,
    from: &'static str,
    to: &'static str,
    at_ms: u64,
}

/// Runs the pass every `gc_interval` until the daemon stops. `agents` reads every
/// agent's record (the core's, handed in by whoever starts the pass: the sessions sit
/// below the core and never call it).
pub fn start<Agents, Read>(
    state: StateHandle,
    agents: Agents,
    lifecycle: SessionLifecycle,
    mut stopped: watch::Receiver<bool>,
) where
    Agents: Fn() -> Read + Send + 'static,
    Read: std::future::Future<Output = Result<Vec<AgentRecord>, Error>> + Send,
{
    let every = lifecycle.gc_interval.as_millis() as u64;
    crate::metrics::record::session_gc_due(now_ms() + every);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(lifecycle.gc_interval) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            // How late a pass starts is the cleanup lag of this collector.
            let started = now_ms();
            if let Err(e) = pass(&state, agents().await, lifecycle).await {
                tracing::warn!(error = %e, "session lifecycle pass failed; the next one retries");
            }
            crate::metrics::record::session_gc_ran(started, now_ms() + every);
        }
    });
}

async fn pass(
    state: &StateHandle,
    agents: Result<Vec<AgentRecord>, Error>,
    lifecycle: SessionLifecycle,
) -> Result<GcReport, Error> {
    let agents = activity(&agents?, now_ms());
    state.gc(agents, lifecycle).await
}

/// Per session, whether an agent of it is live and when its agents were last seen
/// working. An agent that ended counts until `ended_at_ms`, so that its session's
/// timers start when it ended, not when it last wrote.
fn activity(agents: &[AgentRecord], now: u64) -> AgentActivity {
    let mut by_session = AgentActivity::new();
    for agent in agents {
        let live = !agent.status.is_final();
        let at_ms = if live {
            now
        } else {
            agent
                .ended_at_ms
                .or(agent.started_at_ms)
                .unwrap_or(agent.created_at_ms)
        };
        let seen = by_session.entry(agent.session.clone()).or_default();
        seen.live |= live;
        seen.at_ms = seen.at_ms.max(at_ms);
    }
    by_session
}

/// Where a session belongs now, given its last write (or creation), its last use and
/// what its agents did.
fn due(
    written_ms: u64,
    last_used_ms: u64,
    agents: Activity,
    now: u64,
    lifecycle: SessionLifecycle,
) -> Option<Lifecycle> {
    let since = |ms: u64| Duration::from_millis(now.saturating_sub(ms));
    let active = written_ms.max(agents.at_ms);
    let unused = since(last_used_ms.max(agents.at_ms));
    if agents.live || since(active) < lifecycle.idle_after {
        Some(Lifecycle::Active)
    } else if unused >= lifecycle.delete_after {
        None
    } else if unused >= lifecycle.archive_after {
        Some(Lifecycle::Archived)
    } else if unused >= lifecycle.suspend_after {
        Some(Lifecycle::Suspended)
    } else {
        Some(Lifecycle::Idle)
    }
}

/// One pass's work so far: what it moved, what it stores, what goes.
struct Pass<'a> {
    agents: &'a AgentActivity,
    now: u64,
    lifecycle: SessionLifecycle,
    events: &'a crate::events::EventBus,
    report: GcReport,
    changed: Vec<(String, String, u64)>,
    doomed: Vec<String>,
}

impl Pass<'_> {
    /// Moves one session (resident or dormant) along, given its clock; where it is now
    /// (`None`: it is to be deleted).
    fn visit(
        &mut self,
        name: &str,
        written_ms: u64,
        last_used_ms: &mut u64,
        now_in: &mut Lifecycle,
    ) -> Option<Lifecycle> {
        let seen = self.agents.get(name).copied().unwrap_or_default();
        let Some(target) = due(written_ms, *last_used_ms, seen, self.now, self.lifecycle) else {
            self.doomed.push(name.to_string());
            return None;
        };
        // Stored, so that the clock an agent started survives its record.
        let used = seen.at_ms > *last_used_ms;
        *last_used_ms = (*last_used_ms).max(seen.at_ms);
        let moved = target != *now_in;
        if moved {
            self.report.moved += 1;
            publish(self.events, name, now_in.name(), target.name(), self.now);
            *now_in = target;
        }
        if moved || used {
            let row = (name.to_string(), target.name().to_string(), *last_used_ms);
            self.changed.push(row);
        }
        Some(target)
    }
}

impl StateService {
    pub(super) async fn gc(
        &mut self,
        agents: &AgentActivity,
        lifecycle: SessionLifecycle,
    ) -> Result<GcReport, Error> {
        let now = now_ms();
        let mut pass = Pass {
            agents,
            now,
            lifecycle,
            events: &self.events,
            report: GcReport::default(),
            changed: Vec::new(),
            doomed: Vec::new(),
        };
        let mut resting = Vec::new();
        // A reserved session has no life of its own yet: it goes with its agent's record.
        for session in self.sessions.values_mut().filter(|s| !s.reserved) {
            let written = session.last_at_ms.unwrap_or(session.created_at_ms);
            let target = pass.visit(
                &session.name,
                written,
                &mut session.last_used_ms,
                &mut session.lifecycle,
            );
            if matches!(target, Some(Lifecycle::Suspended | Lifecycle::Archived)) {
                session.unload();
                resting.push(session.name.clone());
            }
        }
        for (name, d) in self.dormant.iter_mut().filter(|(_, d)| !d.reserved) {
            pass.visit(name, d.written_ms, &mut d.last_used_ms, &mut d.lifecycle);
        }
        let Pass {
            mut report,
            changed,
            doomed,
            ..
        } = pass;
        for name in resting {
            self.doze(&name);
        }
        if !changed.is_empty() {
            let packed = self
                .db
                .call(move |conn| store::set_lifecycles(conn, &changed))
                .await?;
            self.budget.stored(&packed);
        }
        let days = lifecycle.delete_after.as_secs_f64() / 86_400.0;
        for name in doomed {
            self.wake(&name).await?;
            let from = self.sessions.get(&name).map(|s| s.lifecycle.name());
            let reason = format!("no activity for {days:.0} days (session_delete)");
            self.remove(&name, "gc".into(), reason, Vec::new(), None)
                .await?;
            publish(
                &self.events,
                &name,
                from.unwrap_or("archived"),
                "deleted",
                now,
            );
            report.deleted.push(name);
        }
        Ok(report)
    }

    /// Reads the head of a session that is not in memory, and marks the session used
    /// (and active, if it was not).
    pub(super) async fn use_session(&mut self, name: &str) -> Result<(), Error> {
        let begun = std::time::Instant::now();
        let session = self.session(name)?;
        let cold = !session.loaded;
        if !session.loaded {
            let (owned, schema, head) = (name.to_string(), session.schema.clone(), session.head);
            let current = if head == 0 {
                schema.initial_state()
            } else {
                self.db
                    .call(move |conn| store::state_at(conn, &owned, &schema, head))
                    .await?
            };
            if let Some(session) = self.sessions.get_mut(name) {
                session.current = current;
                session.remeasure();
            }
            self.keep_cache(name);
        }
        let now = now_ms();
        let Some(session) = self.sessions.get_mut(name) else {
            return Ok(());
        };
        session.last_used_ms = now;
        if session.lifecycle != Lifecycle::Active {
            let from = session.lifecycle;
            session.lifecycle = Lifecycle::Active;
            publish(&self.events, name, from.name(), "active", now);
            let row = vec![(name.to_string(), "active".to_string(), now)];
            self.db
                .call(move |conn| store::set_lifecycles(conn, &row))
                .await?;
        }
        if cold {
            crate::metrics::record::session_cold_start(begun);
        }
        Ok(())
    }

    /// Keeps at most `session_cache` heads in memory: the least recently used others
    /// than `keep` leave.
    pub(super) fn keep_cache(&mut self, keep: &str) {
        // A session with updates not yet stored keeps its head: it is ahead of the store.
        let pending: HashSet<&str> = self
            .pending
            .iter()
            .map(|p| p.event.session.as_str())
            .collect();
        let mut loaded: Vec<(u64, String)> = self
            .sessions
            .values()
            .filter(|s| s.loaded && s.name != keep && !pending.contains(s.name.as_str()))
            .map(|s| (s.last_used_ms, s.name.clone()))
            .collect();
        if loaded.len() < self.cache {
            return;
        }
        loaded.sort_unstable();
        let over = loaded.len() + 1 - self.cache;
        drop(pending);
        for (_, name) in loaded.into_iter().take(over) {
            if let Some(session) = self.sessions.get_mut(&name) {
                session.unload();
            }
            self.doze(&name);
        }
    }
}

fn publish(
    events: &crate::events::EventBus,
    session: &str,
    from: &'static str,
    to: &'static str,
    at_ms: u64,
) {
    let transition = Transition {
        session,
        from,
        to,
        at_ms,
    };
    events.publish("session.lifecycle", &transition, Some(session), None);
}

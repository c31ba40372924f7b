//! The daemon's event bus: everything worth telling a parent (agent.*, state.updated,
//! janitor.removed, disk.pressure) is published here once, and every subscriber gets
//! it in order or is told that it fell behind.

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Events kept for slow subscribers before they are told they lagged. Tests shrink it
/// (GROVE_TEST_EVENT_BACKLOG) to make lagging cheap to provoke.
fn backlog() -> usize {
    crate::faults::test_var("GROVE_TEST_EVENT_BACKLOG")
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4096)
}

#[derive(Debug, Clone)]
pub struct Event {
    /// The notification's method, e.g. `agent.exited`.
    pub method: &'static str,
    pub params: Value,
    /// For filtering: the session and the agent the event is about, when there are.
    pub session: Option<String>,
    pub agent: Option<String>,
}

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            tx: broadcast::channel(backlog()).0,
        }
    }
}

impl EventBus {
    pub fn publish(
        &self,
        method: &'static str,
        params: &impl Serialize,
        session: Option<&str>,
        agent: Option<&str>,
    ) {
        let event = Event {
            method,
            params: serde_json::to_value(params).unwrap_or(Value::Null),
            session: session.map(str::to_string),
            agent: agent.map(str::to_string),
        };
        // No subscriber is fine: nobody is listening.
        let _ = self.tx.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

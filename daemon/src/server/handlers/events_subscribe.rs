//! `events.subscribe`: every event (optionally of one session or agent) as a
//! notification, in order; a subscriber that falls behind is told so.

use super::super::connection::Conn;
use super::super::stream::stream;
use super::super::Ctx;
use super::Answer;
use grove_proto::methods::{SubscribeParams, SubscribeResult};
use serde_json::Value;

pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    params: SubscribeParams,
) -> Option<Answer> {
    // An agent hears only about its own session and its own agents (see AgentScope).
    let session = match (conn.agent(), params.session) {
        (Some(me), Some(named)) if named != me.session => {
            return Some(Err(crate::Error::Refused(format!(
                "agent {} may subscribe only to its own session `{}`",
                me.id, me.session
            ))
            .into()))
        }
        (_, named) => named,
    };
    let agent = match params.agent {
        Some(prefix) => match super::authority::visible(ctx, conn, &prefix).await {
            Ok(record) => Some(record.id),
            Err(e) => return Some(Err(e.into())),
        },
        None => None,
    };
    // Subscribed before the agents are read, so that no child spawned in between is
    // missed: the filter learns new children from their own events.
    let events = ctx.events.subscribe();
    let scope = match conn.agent() {
        Some(me) => match AgentScope::of(ctx, &me.id, &me.session).await {
            Ok(scope) => Some(scope),
            Err(e) => return Some(Err(e.into())),
        },
        None => None,
    };
    stream(
        conn,
        id,
        SubscribeResult { subscribed: true },
        events,
        "events.lagged",
        "call agent.list (and state.get) for the current picture, then keep reading",
        move |event| {
            session
                .as_ref()
                .is_none_or(|s| event.session.as_ref() == Some(s))
                && agent
                    .as_ref()
                    .is_none_or(|a| event.agent.as_ref() == Some(a))
                && scope.as_ref().is_none_or(|scope| scope.admits(event))
        },
    )
    .await;
    None
}

/// What an agent may hear: its own session's state, and the agent events of itself and
/// the agents it spawned (directly or not, whatever their session), never its
/// siblings' argv or reports.
struct AgentScope {
    session: String,
    mine: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl AgentScope {
    async fn of(ctx: &Ctx, me: &str, session: &str) -> Result<AgentScope, crate::Error> {
        let mut mine: std::collections::HashSet<String> = ctx
            .core
            .list(crate::core::ListPage {
                all: true,
                within: Some(me.to_string()),
                after: None,
                limit: usize::MAX,
            })
            .await?
            .iter()
            .map(|listed| listed.id.clone())
            .collect();
        mine.insert(me.to_string());
        Ok(AgentScope {
            session: session.to_string(),
            mine: std::sync::Mutex::new(mine),
        })
    }

    fn admits(&self, event: &crate::events::Event) -> bool {
        let in_session = event.session.as_deref() == Some(self.session.as_str());
        let agent = match &event.agent {
            Some(agent) if !event.method.starts_with("state.") => agent,
            _ => return in_session,
        };
        let Ok(mut mine) = self.mine.lock() else {
            return false;
        };
        let parent = event.params.get("parent").and_then(Value::as_str);
        if event.method.starts_with("agent.") && parent.is_some_and(|p| mine.contains(p)) {
            mine.insert(agent.clone());
        }
        mine.contains(agent)
    }
}

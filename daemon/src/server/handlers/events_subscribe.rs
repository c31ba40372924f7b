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
    // An agent hears only about its own session.
    let session = match (conn.agent(), params.session) {
        (Some(me), Some(named)) if named != me.session => {
            return Some(Err(crate::Error::Refused(format!(
                "agent {} may subscribe only to its own session `{}`",
                me.id, me.session
            ))
            .into()))
        }
        (Some(me), _) => Some(me.session.clone()),
        (None, named) => named,
    };
    let agent = match params.agent {
        Some(prefix) => match ctx.core.get(&prefix).await {
            Ok(record) => Some(record.id),
            Err(e) => return Some(Err(e.into())),
        },
        None => None,
    };
    let events = ctx.events.subscribe();
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
        },
    )
    .await;
    None
}

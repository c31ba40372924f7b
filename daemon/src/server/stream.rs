//! Subscriptions: answer the request, then forward matching events from the bus as
//! notifications until the client leaves. A subscriber that falls behind gets one
//! `<prefix>.lagged` notification saying how many it missed and how to resync.

use super::connection::Conn;
use super::handlers::Json;
use crate::events::Event;
use grove_proto::Notification;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::broadcast::{error::RecvError, Receiver};

pub async fn stream(
    conn: &Conn,
    id: Option<Value>,
    result: impl serde::Serialize,
    mut events: Receiver<Arc<Event>>,
    lagged_method: &'static str,
    resync: &'static str,
    wanted: impl Fn(&Event) -> bool,
) {
    conn.respond(id, Json::of(&result)).await;
    loop {
        let notification = match events.recv().await {
            Ok(event) if wanted(&event) => Notification {
                jsonrpc: "2.0".into(),
                method: event.method.into(),
                params: event.params.clone(),
            },
            Ok(_) => continue,
            Err(RecvError::Lagged(missed)) => Notification {
                jsonrpc: "2.0".into(),
                method: lagged_method.into(),
                params: json!({ "missed": missed, "resync": resync }),
            },
            Err(RecvError::Closed) => return,
        };
        if !conn.send(&notification).await {
            return;
        }
    }
}

//! `state.watch`: answer with the current head, then push `state.updated` for each
//! applied batch of the session until the client leaves. A subscriber that falls behind
//! is told so (`state.lagged`), never silently skipped.

use super::super::connection::Conn;
use super::super::Ctx;
use grove_proto::methods::{StateWatchParams, StateWatchResult};
use grove_proto::{Notification, RpcError};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    params: StateWatchParams,
) -> Option<Result<Value, RpcError>> {
    let caller = match super::caller(ctx, params.session.as_deref(), params.token.as_deref()).await
    {
        Ok(caller) => caller,
        Err(e) => return Some(Err(e.into())),
    };
    // Subscribe before reading the head, so no update falls between the two.
    let mut events = ctx.state.subscribe();
    let head = match ctx.state.info(&caller.session).await {
        Ok(info) => info.head,
        Err(e) => return Some(Err(e.into())),
    };
    let result = StateWatchResult {
        session: caller.session.clone(),
        checkpoint: head,
    };
    conn.respond(
        id,
        serde_json::to_value(result)
            .map_err(|e| RpcError::new(grove_proto::codes::INTERNAL_ERROR, e.to_string())),
    )
    .await;
    loop {
        let notification = match events.recv().await {
            Ok(event) if event.session == caller.session && event.checkpoint > head => {
                Notification {
                    jsonrpc: "2.0".into(),
                    method: "state.updated".into(),
                    params: serde_json::to_value(&event).unwrap_or(Value::Null),
                }
            }
            Ok(_) => continue,
            Err(RecvError::Lagged(missed)) => Notification {
                jsonrpc: "2.0".into(),
                method: "state.lagged".into(),
                params: json!({
                    "session": caller.session,
                    "missed": missed,
                    "resync": "call state.get for the current state, then keep reading",
                }),
            },
            Err(RecvError::Closed) => return None,
        };
        if !conn.send(&notification).await {
            return None;
        }
    }
}

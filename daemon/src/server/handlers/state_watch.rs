//! `state.watch`: answer with the current head, then push `state.updated` for each
//! applied batch of the session until the client leaves.

use super::super::connection::Conn;
use super::super::stream::stream;
use super::super::Ctx;
use super::{Answer, Caller};
use grove_proto::methods::StateWatchResult;
use serde_json::Value;

pub async fn handle(ctx: &Ctx, conn: &Conn, id: Option<Value>, caller: Caller) -> Option<Answer> {
    // Subscribe before reading the head, so no update falls between the two.
    let events = ctx.events.subscribe();
    let head = match ctx.state.info(&caller.session).await {
        Ok(info) => info.head,
        Err(e) => return Some(Err(e.into())),
    };
    let session = caller.session.clone();
    let result = StateWatchResult {
        session: caller.session,
        checkpoint: head,
    };
    stream(
        conn,
        id,
        result,
        events,
        "state.lagged",
        "call state.get for the current state, then keep reading",
        move |event| {
            event.method == "state.updated"
                && event.session.as_deref() == Some(session.as_str())
                && event.params["checkpoint"].as_u64() > Some(head)
        },
    )
    .await;
    None
}

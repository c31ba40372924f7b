use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateGetParams, StateGetResult};
use serde_json::Value;

/// `state.get`: the state (or one channel) now, or right after a checkpoint.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: StateGetParams,
) -> Result<StateGetResult, Error> {
    let caller = super::caller(
        ctx,
        conn,
        params.session.as_deref(),
        params.token.as_deref(),
    )
    .await?;
    let begun = std::time::Instant::now();
    let (checkpoint, state) = ctx.state.get(&caller.session, params.at).await?;
    if params.at.is_some() {
        crate::metrics::restored(begun);
    }
    let state = match &params.channel {
        None => Value::Object(state),
        Some(channel) => state.get(channel).cloned().ok_or_else(|| {
            Error::NotFound(format!(
                "session `{}` has no channel `{channel}`",
                caller.session
            ))
        })?,
    };
    Ok(StateGetResult {
        session: caller.session,
        checkpoint,
        state,
    })
}

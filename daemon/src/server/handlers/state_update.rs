use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateUpdateParams, StateUpdateResult};
use grove_state::Write;

/// `state.update`: one atomic batch; answered once it is durable.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: StateUpdateParams,
) -> Result<StateUpdateResult, Error> {
    let caller = super::caller(
        ctx,
        conn,
        params.session.as_deref(),
        params.token.as_deref(),
    )
    .await?;
    let writes = params
        .writes
        .into_iter()
        .map(|w| Write {
            channel: w.channel,
            value: w.value,
            base: w.base,
        })
        .collect();
    let begun = std::time::Instant::now();
    let checkpoint = ctx
        .state
        .update(
            &caller.session,
            &caller.writer,
            writes,
            conn.idempotency_key().map(String::from),
        )
        .await?;
    crate::metrics::checkpoint_saved(begun);
    Ok(StateUpdateResult {
        session: caller.session,
        checkpoint,
    })
}

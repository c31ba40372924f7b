use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{StateHistoryParams, StateHistoryResult};
use grove_proto::MAX_LINE_BYTES;

/// Checkpoints per answer stay under this many bytes of JSON, inside the line cap with
/// room for the envelope.
const MAX_PAGE_BYTES: u64 = (MAX_LINE_BYTES - 64 * 1024) as u64;

/// `state.history`: the newest checkpoints first, in pages within the line cap.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: StateHistoryParams,
) -> Result<StateHistoryResult, Error> {
    let caller = super::caller(ctx, conn, &params).await?;
    let limit = params.limit.unwrap_or(100).clamp(1, 100_000);
    let mut checkpoints = ctx
        .state
        .history(&caller.session, limit, params.before)
        .await?;
    let fits = fitting(&checkpoints, MAX_PAGE_BYTES);
    let next = (fits < checkpoints.len()).then(|| checkpoints[fits - 1].id);
    checkpoints.truncate(fits);
    Ok(StateHistoryResult {
        session: caller.session,
        checkpoints,
        next,
    })
}

/// How many of the first items fit in `max_bytes` of JSON (at least one).
fn fitting<T: serde::Serialize>(items: &[T], max_bytes: u64) -> usize {
    let mut bytes = 0;
    for (n, item) in items.iter().enumerate() {
        bytes += crate::sessions::json_bytes(item) + 1;
        if n > 0 && bytes > max_bytes {
            return n;
        }
    }
    items.len()
}

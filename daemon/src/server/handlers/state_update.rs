use super::super::connection::Conn;
use super::super::Ctx;
use super::Caller;
use crate::sessions::code_ref::{settle_off_thread, Held};
use crate::Error;
use grove_proto::methods::{StateUpdateParams, StateUpdateResult};
use grove_proto::state::CodeRef;
use grove_state::Write;

/// `state.update`: one atomic batch; answered once it is durable.
pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    caller: Caller,
    params: StateUpdateParams,
) -> Result<StateUpdateResult, Error> {
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
    let (code, held) = if caller.agent {
        agent_code(ctx, &caller.writer).await.unzip()
    } else {
        (None, None)
    };
    let checkpoint = ctx
        .state
        .update_in_tree(
            &caller.session,
            &caller.writer,
            caller.tree.as_deref(),
            writes,
            conn.idempotency_key().map(String::from),
            code,
        )
        .await;
    // Named before the answer: once an agent's update returns, its code has its ref.
    if let Some(held) = held {
        let at = checkpoint.as_ref().ok().copied();
        settle_off_thread(held, caller.session.clone(), at).await;
    }
    let checkpoint = checkpoint?;
    crate::metrics::checkpoint_saved(begun);
    Ok(StateUpdateResult {
        session: caller.session,
        checkpoint,
    })
}

/// The code the agent has now, recorded with its checkpoint, and the ref holding it. A
/// failure records none (the write itself still stands) and is logged.
async fn agent_code(ctx: &Ctx, id: &str) -> Option<(CodeRef, Held)> {
    let record = ctx.core.get(id).await.ok()?;
    if !record.status.is_running() || !record.worktree.is_dir() {
        return None;
    }
    let agent_dir = ctx.config.dirs.agent_dir(&record.id);
    let max_file = ctx.config.salvage_max_file;
    let begun = std::time::Instant::now();
    let lock = ctx.checkpoint_locks.get_pruning(&record.id);
    let recorded = tokio::task::spawn_blocking(move || {
        crate::sessions::code::record(&record, &agent_dir, max_file, &lock)
    })
    .await;
    match recorded {
        Ok(Ok(code)) => {
            tracing::debug!(agent = %id, ms = begun.elapsed().as_millis() as u64, "code recorded");
            Some(code)
        }
        Ok(Err(e)) => {
            tracing::warn!(agent = %id, error = %e, "cannot record the code of a checkpoint");
            None
        }
        Err(e) => {
            tracing::warn!(agent = %id, error = %e, "cannot record the code of a checkpoint");
            None
        }
    }
}

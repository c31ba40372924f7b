use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::agent_log::LogView;
use grove_proto::methods::{LogsParams, LogsResult};

const MAX_CHUNK: u64 = 512 * 1024;

/// `agent.logs`: a chunk of the agent's output from `offset`.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: LogsParams) -> Result<LogsResult, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    let max = params.max_bytes.unwrap_or(MAX_CHUNK).clamp(1, MAX_CHUNK);
    let path = record.log_path.clone();
    let offset = params.offset;
    let (from, text, read) =
        tokio::task::spawn_blocking(move || read_chunk(&path, offset, max)).await??;
    let next_offset = from + read;
    let at_end = read < max;
    Ok(LogsResult {
        id: record.id,
        text: String::from_utf8_lossy(&text).into_owned(),
        offset: from,
        next_offset,
        complete: at_end && record.status.is_final(),
    })
}

/// Up to `max` bytes of the log from logical `offset` (see `grove_proto::agent_log`):
/// where they begin, the text (led by the marker when dropped output was skipped) and
/// how many bytes of the log it holds.
fn read_chunk(path: &std::path::Path, offset: u64, max: u64) -> Result<(u64, Vec<u8>, u64), Error> {
    let mut view = LogView::open(path).map_err(Error::io("read", path))?;
    let (from, bytes) = view.read(offset, max).map_err(Error::io("read", path))?;
    let read = bytes.len() as u64;
    Ok((from, view.with_marker(offset, bytes), read))
}

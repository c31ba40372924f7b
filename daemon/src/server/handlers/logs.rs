use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::{LogsParams, LogsResult};
use std::io::{Read, Seek, SeekFrom};

const MAX_CHUNK: u64 = 512 * 1024;

/// `agent.logs`: a chunk of the agent's output from `offset`.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: LogsParams) -> Result<LogsResult, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    let max = params.max_bytes.unwrap_or(MAX_CHUNK).clamp(1, MAX_CHUNK);
    let path = record.log_path.clone();
    let offset = params.offset;
    let bytes = tokio::task::spawn_blocking(move || read_chunk(&path, offset, max)).await??;
    let next_offset = offset + bytes.len() as u64;
    let at_end = (bytes.len() as u64) < max;
    Ok(LogsResult {
        id: record.id,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        offset,
        next_offset,
        complete: at_end && record.status.is_final(),
    })
}

fn read_chunk(path: &std::path::Path, offset: u64, max: u64) -> Result<Vec<u8>, Error> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read", path)(e)),
    };
    file.seek(SeekFrom::Start(offset))
        .map_err(Error::io("read", path))?;
    let mut bytes = Vec::new();
    file.take(max)
        .read_to_end(&mut bytes)
        .map_err(Error::io("read", path))?;
    Ok(bytes)
}

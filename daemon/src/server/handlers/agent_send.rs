//! `agent.send`: types into the agent's terminal, or writes to its kept-open stdin.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::descendant;
use crate::console;
use crate::Error;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::methods::{attach, SendParams, SendResult};

/// Most bytes one `agent.send` types (a paste of a long prompt fits; a file does not
/// belong in a terminal).
const MAX_SEND: usize = 256 << 10;

/// How long after the text Enter is pressed on a terminal. TUIs that tell a paste from
/// typing by timing (Codex takes an Enter within 120 ms of the last character as a
/// newline in the paste) must see the Enter as a key of its own, as a person's is.
const ENTER_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

pub async fn handle(ctx: &Ctx, conn: &Conn, params: SendParams) -> Result<SendResult, Error> {
    let mut bytes = match (&params.text, &params.data) {
        (Some(text), None) => text.as_bytes().to_vec(),
        (None, Some(data)) => {
            attach::decode(data).map_err(|e| Error::BadInput(format!("`data` is {e}")))?
        }
        (None, None) if params.enter => Vec::new(),
        (None, None) => {
            return Err(Error::BadInput(
                "nothing to send: give `text`, `data` or `enter`".into(),
            ))
        }
        (Some(_), Some(_)) => {
            return Err(Error::BadInput(
                "give either `text` or `data`, not both".into(),
            ))
        }
    };
    if bytes.is_empty() && !params.enter {
        return Err(Error::BadInput(
            "nothing to send: the text is empty and no Enter follows it (drop --no-enter \
             to press Enter alone)"
                .into(),
        ));
    }
    let record = descendant(ctx, conn, &params.id).await?;
    console::check_reachable(&record, false)?;
    // A terminal's Enter key sends a carriage return, typed apart from the text; a pipe
    // reader wants a newline with it.
    let enter_key = params.enter && record.tty.is_some() && !bytes.is_empty();
    if params.enter && !enter_key {
        bytes.push(if record.tty.is_some() { b'\r' } else { b'\n' });
    }
    if bytes.len() > MAX_SEND {
        return Err(Error::BadInput(format!(
            "{} bytes is more than one send takes ({MAX_SEND}); send it in parts or put it \
             in a file in the agent's worktree",
            bytes.len()
        )));
    }
    let mut sent = typed(ctx, &record, bytes).await?;
    if enter_key {
        tokio::time::sleep(ENTER_AFTER).await;
        sent += typed(ctx, &record, b"\r".to_vec()).await?;
    }
    Ok(SendResult {
        id: record.id,
        bytes: sent,
    })
}

/// Hands `bytes` to the agent's terminal or stdin; how many it took.
async fn typed(
    ctx: &Ctx,
    record: &grove_proto::types::AgentRecord,
    bytes: Vec<u8>,
) -> Result<u64, Error> {
    match console::ask(&ctx.config.dirs, record, ToShim::Input(bytes)).await? {
        FromShim::Accepted(n) => Ok(n),
        other => Err(Error::ConsoleAnswer {
            asked: "input",
            answer: format!("{other:?}"),
        }),
    }
}

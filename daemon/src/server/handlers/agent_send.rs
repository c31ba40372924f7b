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
    let record = descendant(ctx, conn, &params.id).await?;
    console::check_reachable(&record, false)?;
    if params.enter {
        // A terminal's Enter key sends a carriage return; a pipe reader wants a newline.
        bytes.push(if record.tty.is_some() { b'\r' } else { b'\n' });
    }
    if bytes.len() > MAX_SEND {
        return Err(Error::BadInput(format!(
            "{} bytes is more than one send takes ({MAX_SEND}); send it in parts or put it \
             in a file in the agent's worktree",
            bytes.len()
        )));
    }
    match console::ask(&ctx.config.dirs, &record, ToShim::Input(bytes)).await? {
        FromShim::Accepted(n) => Ok(SendResult {
            id: record.id,
            bytes: n,
        }),
        other => Err(Error::ConsoleAnswer {
            asked: "input",
            answer: format!("{other:?}"),
        }),
    }
}

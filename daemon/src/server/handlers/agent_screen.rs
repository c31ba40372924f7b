//! `agent.screen`: the agent's terminal as it looks now.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::descendant;
use crate::console;
use crate::Error;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::methods::{ScreenParams, ScreenResult};

pub async fn handle(ctx: &Ctx, conn: &Conn, params: ScreenParams) -> Result<ScreenResult, Error> {
    let record = descendant(ctx, conn, &params.id).await?;
    console::check_reachable(&record, true)?;
    let request = ToShim::Screen { ansi: params.ansi };
    match console::ask(&ctx.config.dirs, &record, request).await? {
        FromShim::Screen { size, cursor, text } => Ok(ScreenResult {
            id: record.id,
            text: String::from_utf8_lossy(&text).into_owned(),
            size,
            cursor,
        }),
        other => Err(Error::ConsoleAnswer {
            asked: "a screen request",
            answer: format!("{other:?}"),
        }),
    }
}

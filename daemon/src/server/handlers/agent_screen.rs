//! `agent.screen`: the agent's terminal as it looks now, or, once it ended, as its shim
//! kept it (`last-screen.json`).

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::descendant;
use crate::console;
use crate::Error;
use grove_proto::console::{FromShim, LastScreen, ToShim};
use grove_proto::methods::{ScreenParams, ScreenResult};

pub async fn handle(ctx: &Ctx, conn: &Conn, params: ScreenParams) -> Result<ScreenResult, Error> {
    let record = descendant(ctx, conn, &params.id).await?;
    if !record.status.is_running() && record.tty.is_some() {
        return last_screen(ctx, record, params.ansi).await;
    }
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

/// The screen a finished tty agent's shim kept as it ended.
async fn last_screen(
    ctx: &Ctx,
    record: grove_proto::types::AgentRecord,
    ansi: bool,
) -> Result<ScreenResult, Error> {
    let path = ctx
        .config
        .dirs
        .agent_dir(&record.id)
        .join(grove_proto::console::LAST_SCREEN_FILE);
    // A small file the shim wrote once: read on a blocking thread, as all files are.
    let kept = tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&path).ok()?;
        serde_json::from_slice::<LastScreen>(&bytes).ok()
    })
    .await
    .ok()
    .flatten();
    let Some(kept) = kept else {
        return Err(Error::InvalidState(format!(
            "agent {} is {} and its last screen was not kept (its shim ended before it \
             could write it, or the record outlived its files); `grove logs {}` shows its \
             output",
            record.id,
            record.status_text(),
            record.id
        )));
    };
    Ok(ScreenResult {
        id: record.id,
        text: if ansi { kept.ansi } else { kept.text },
        size: kept.size,
        cursor: kept.cursor,
    })
}

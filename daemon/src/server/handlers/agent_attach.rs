//! `agent.attach`: the connection becomes a view of the agent's terminal. Output goes
//! out as `attach.output` notifications; `attach.input` and `attach.resize`
//! notifications from the client come in through the connection's reader, in order
//! (see `Conn::attach_inbound`). When the agent ends, `attach.end` carries its final
//! record.

use super::super::connection::{Conn, Inbound};
use super::super::Ctx;
use super::authority::descendant;
use super::{Answer, Json};
use crate::console::{self, Incoming, Outgoing};
use crate::Error;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::methods::{attach, AttachParams, AttachResult};
use grove_proto::Notification;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long, after the terminal closed, attach waits for the agent's final record.
const OUTCOME_WAIT: Duration = Duration::from_secs(30);

pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    params: AttachParams,
) -> Option<Answer> {
    if params.direct {
        return hand_over(ctx, conn, id, &params)
            .await
            .err()
            .map(|e| Err(e.into()));
    }
    let (mut incoming, mut outgoing, result) = match open(ctx, conn, &params).await {
        Ok(opened) => opened,
        Err(e) => return Some(Err(e.into())),
    };
    let Some(mut inbound) = conn.attach_inbound() else {
        return Some(Err(Error::InvalidState(
            "this connection is attached already: open another connection to attach again".into(),
        )
        .into()));
    };
    let agent = result.id.clone();
    conn.respond(id, Json::of(&result)).await;
    let ended = relay(
        conn,
        &mut incoming,
        &mut outgoing,
        &mut inbound,
        params.read_only,
    )
    .await;
    conn.detach_inbound();
    if ended {
        finish(ctx, conn, &agent).await;
    }
    None
}

/// Connects to the shim and hands the connection to the client: keys and output then
/// go between the client and the shim alone, as fast as the terminal allows, and even
/// while the daemon restarts.
async fn hand_over(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    params: &AttachParams,
) -> Result<(), Error> {
    let record = descendant(ctx, conn, &params.id).await?;
    console::check_reachable(&record, true)?;
    let stream = console::connect_stream(&ctx.config.dirs, &record.id)
        .await
        .map_err(|e| {
            Error::InvalidState(format!(
                "cannot reach the terminal of agent {}: {e}",
                record.id
            ))
        })?;
    let fd = std::os::fd::OwnedFd::from(stream.into_std().map_err(|source| Error::Os {
        what: "hand over the terminal",
        source,
    })?);
    let result = AttachResult {
        id: record.id.clone(),
        screen: String::new(),
        size: record.tty.unwrap_or_default(),
        direct: true,
    };
    let json = serde_json::to_vec(&result)
        .map(Json::raw)
        .map_err(|source| Error::Encode {
            what: "the attach result",
            source,
        })?;
    conn.respond_with_fd(id, json, fd).await;
    Ok(())
}

/// Checks, connects to the shim, takes the viewer's size and asks for the screen.
async fn open(
    ctx: &Ctx,
    conn: &Conn,
    params: &AttachParams,
) -> Result<(Incoming, Outgoing, AttachResult), Error> {
    let record = descendant(ctx, conn, &params.id).await?;
    console::check_reachable(&record, true)?;
    let unreachable = |e: std::io::Error| {
        Error::InvalidState(format!(
            "cannot reach the terminal of agent {}: {e}",
            record.id
        ))
    };
    let (mut incoming, mut outgoing) = console::connect(&ctx.config.dirs, &record.id)
        .await
        .map_err(unreachable)?;
    if let (Some(size), false) = (params.size, params.read_only) {
        outgoing
            .send(&ToShim::Resize(size))
            .await
            .map_err(unreachable)?;
    }
    outgoing.send(&ToShim::Watch).await.map_err(unreachable)?;
    loop {
        match incoming.next().await.map_err(unreachable)? {
            Some(FromShim::Snapshot { size, data }) => {
                let result = AttachResult {
                    id: record.id.clone(),
                    screen: attach::encode(&data),
                    size,
                    direct: false,
                };
                return Ok((incoming, outgoing, result));
            }
            Some(FromShim::Refused(why)) => {
                return Err(Error::InvalidState(format!("agent {}: {why}", record.id)))
            }
            // The answer to the resize.
            Some(_) => continue,
            None => {
                return Err(Error::InvalidState(format!(
                    "agent {} ended as the terminal was opened",
                    record.id
                )))
            }
        }
    }
}

/// Copies both ways until the terminal closes (true) or the client leaves (false).
async fn relay(
    conn: &Conn,
    incoming: &mut Incoming,
    outgoing: &mut Outgoing,
    inbound: &mut mpsc::Receiver<Inbound>,
    read_only: bool,
) -> bool {
    loop {
        tokio::select! {
            message = incoming.next() => match message {
                Ok(Some(FromShim::Output(bytes))) => {
                    let data = attach::Data { data: attach::encode(&bytes) };
                    if !conn.send(&notification(attach::OUTPUT, &data)).await {
                        return false;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return true,
            },
            from_client = inbound.recv() => {
                let request = match from_client {
                    Some(_) if read_only => continue,
                    Some(Inbound::Input(bytes)) => ToShim::Keys(bytes),
                    Some(Inbound::Resize(size)) => ToShim::Resize(size),
                    None => return false,
                };
                if outgoing.send(&request).await.is_err() {
                    return true;
                }
            }
        }
    }
}

async fn finish(ctx: &Ctx, conn: &Conn, agent: &str) {
    let end = match tokio::time::timeout(OUTCOME_WAIT, ctx.core.wait(agent)).await {
        Ok(Ok(record)) => attach::End {
            record: Some(record),
            reason: None,
        },
        _ => attach::End {
            record: None,
            reason: Some(format!(
                "the terminal of agent {agent} closed, but its outcome is not known yet: \
                 `grove wait {agent}`"
            )),
        },
    };
    conn.send(&notification(attach::END, &end)).await;
}

fn notification(method: &str, params: &impl serde::Serialize) -> Notification {
    Notification {
        jsonrpc: "2.0".into(),
        method: method.into(),
        params: serde_json::to_value(params).unwrap_or(Value::Null),
    }
}

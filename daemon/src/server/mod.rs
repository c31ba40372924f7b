//! The socket server: accepts connections from the daemon's own uid only, and serves
//! each on its own task.

mod connection;
mod handlers;
mod peer;
mod stream;

use crate::config::Config;
use crate::core::CoreHandle;
use crate::db::Db;
use crate::events::EventBus;
use crate::git::lane::Lanes;
use crate::janitor::JanitorHandle;
use crate::state::StateHandle;
use grove_proto::framing::encode_line;
use grove_proto::{codes, Response, RpcError};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// What every request handler may use.
pub struct Ctx {
    pub core: CoreHandle,
    pub janitor: JanitorHandle,
    pub state: StateHandle,
    pub events: EventBus,
    pub db: Db,
    pub lanes: Lanes,
    pub config: Arc<Config>,
    pub started_at_ms: u64,
    /// Set to true to stop the daemon.
    pub stop: watch::Sender<bool>,
}

/// Serves until `ctx.stop` is set, then lets open connections flush their last
/// responses (bounded, so that a stuck client cannot hold the daemon up).
pub async fn serve(listener: UnixListener, ctx: Arc<Ctx>) {
    let mut stopped = ctx.stop.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, _)) => {
                    room_for_a_whole_line(&stream);
                    let ctx = ctx.clone();
                    connections.spawn(async move {
                        if admit(&mut stream).await {
                            connection::serve(stream, ctx).await;
                        }
                    });
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close in time");
    }
}

/// Lets one answer of up to a full line (a page of `agent.list`) go into the socket in
/// one write. With the default buffer (~200 KiB) a 1 MiB answer went out in many
/// rounds, each waiting for the client to wake up and read; that waiting was most of
/// what a long `grove --json list` took. The kernel caps the size at
/// `net.core.wmem_max`, and the memory is used only while an answer is in flight.
fn room_for_a_whole_line(stream: &UnixStream) {
    use nix::sys::socket::{setsockopt, sockopt::SndBuf};
    if let Err(e) = setsockopt(stream, SndBuf, &(grove_proto::MAX_LINE_BYTES + 64 * 1024)) {
        tracing::debug!(error = %e, "cannot grow the send buffer; answers go out in rounds");
    }
}

/// Only processes of the daemon's own uid may talk to it.
async fn admit(stream: &mut UnixStream) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == me => true,
        Ok(cred) => {
            tracing::warn!(uid = cred.uid(), "refused a connection from another user");
            let error = RpcError::new(
                codes::REFUSED,
                format!("this grove daemon serves uid {me} only"),
            );
            let line = encode_line(&Response::err(serde_json::Value::Null, error));
            let _ = stream.write_all(&line).await;
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read peer credentials; refusing");
            false
        }
    }
}

//! The socket server: accepts connections from the daemon's own uid only, and serves
//! each on its own task.

mod agent_slots;
mod connection;
mod connection_slots;
mod handlers;
mod idempotency;
pub mod metrics;
mod peer;
mod stream;

use crate::config::Config;
use crate::core::CoreHandle;
use crate::db::Db;
use crate::events::EventBus;
use crate::git::lane::Lanes;
use crate::janitor::JanitorHandle;
use crate::sessions::StateHandle;
use grove_proto::framing::encode_line;
use grove_proto::{codes, Response, RpcError};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    pub connections: ConnectionSlots,
    pub agent_connections: agent_slots::AgentSlots,
    /// Connections of each agent tree, by its root.
    pub tree_connections: agent_slots::AgentSlots,
    pub idempotency: idempotency::KeyLocks,
    /// Each running agent's last live diff (`agent.diff`), kept until it is collected.
    pub live_diffs: crate::keyed::Keyed<std::sync::Mutex<handlers::diff::LiveCache>>,
    /// One checkpoint's code recorded at a time per agent: they share its scratch index.
    pub checkpoint_locks: crate::keyed::Keyed<std::sync::Mutex<()>>,
}

/// Serves until `ctx.stop` is set, then lets open connections flush their last
/// responses (bounded, so that a stuck client cannot hold the daemon up).
pub async fn serve(listener: UnixListener, ctx: Arc<Ctx>) {
    let mut stopped = ctx.stop.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    let mut failures = AcceptFailures::default();
    loop {
        let mut pause = None;
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, _)) => {
                    failures.recovered();
                    let Some(slot) = ctx.connections.take() else {
                        turn_away(&stream, &ctx.connections);
                        continue;
                    };
                    room_for_a_whole_line(&stream);
                    let ctx = ctx.clone();
                    connections.spawn(async move {
                        if admit(&mut stream).await {
                            connection::serve(stream, ctx, slot.reserved).await;
                        }
                        // Held until the connection is done.
                        drop(slot);
                    });
                }
                Err(e) => pause = Some(failures.failed(&e)),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
        // Out of descriptors, the connection stays queued and accept fails again at
        // once: without a pause that is a busy loop.
        if let Some(pause) = pause {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stopped.wait_for(|stop| *stop) => break,
            }
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

pub use agent_slots::{AgentSlots, Budget};
pub use connection_slots::ConnectionSlots;

/// One line saying why, then the connection is closed. Written without waiting: a
/// fresh socket has room for it, and a client that does not read loses only the line.
fn turn_away(stream: &UnixStream, slots: &ConnectionSlots) {
    let max = slots.max();
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let error = RpcError::new(
        codes::BUSY,
        format!(
            "the grove daemon serves at most {max} connections at once (max_connections) \
             and read nothing of this one; close idle ones and try again"
        ),
    );
    let _ = stream.try_write(&encode_line(&Response::err(serde_json::Value::Null, error)));
    crate::metrics::connection_turned_away();
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
        *last = Some(Instant::now());
        tracing::warn!(
            max,
            open = slots.open(),
            "connection cap reached: turning new connections away (logged once per {}s)",
            LOG_EVERY.as_secs()
        );
    }
}

/// How often a repeated accept failure is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Failed accepts in a row: the pause before the next grows to a second, and the
/// warning is logged once per interval with a count instead of once per failure.
#[derive(Default)]
struct AcceptFailures {
    pause: Option<Duration>,
    logged_at: Option<Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        let pause = self
            .pause
            .map_or(FIRST_PAUSE, |p| (p * 2).min(LONGEST_PAUSE));
        self.pause = Some(pause);
        self.unlogged += 1;
        if self.logged_at.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(
                error = %error,
                failures = self.unlogged,
                retry_in_ms = pause.as_millis() as u64,
                "accept failed (logged once per {}s)",
                LOG_EVERY.as_secs()
            );
            self.logged_at = Some(Instant::now());
            self.unlogged = 0;
        }
        pause
    }

    /// Accepting again. The back-off starts over; the failures not logged yet are, if
    /// the interval allows (failing and recovering in turn must not flood the log).
    fn recovered(&mut self) {
        if self.pause.take().is_none() {
            return;
        }
        let due = self.logged_at.is_none_or(|at| at.elapsed() >= LOG_EVERY);
        if due && self.unlogged > 0 {
            tracing::warn!(failures = self.unlogged, "accept failed; accepting again");
            self.logged_at = Some(Instant::now());
            self.unlogged = 0;
        }
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

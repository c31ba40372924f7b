//! One task per agent with a terminal: it asks the shim for the agent's activity and
//! hands every change to the core. It sleeps in a read between changes, so idle
//! agents cost the daemon no wake-ups.

use crate::core::CoreHandle;
use grove_proto::console::{FromShim, ToShim};
use grove_proto::paths::Dirs;
use std::time::Duration;

/// The shim binds its socket just after it starts, and the daemon learns of the start
/// from the shim's pid: the first connection may come too early.
const CONNECT_FOR: Duration = Duration::from_secs(10);

pub fn start(core: CoreHandle, dirs: Dirs, id: String) {
    tokio::spawn(async move {
        let Some((mut incoming, mut outgoing)) = connect_soon(&dirs, &id).await else {
            tracing::debug!(agent = %id, "no console to monitor");
            return;
        };
        if outgoing.send(&ToShim::Activity).await.is_err() {
            return;
        }
        while let Ok(Some(message)) = incoming.next().await {
            if let FromShim::Activity(waiting) = message {
                core.activity(&id, waiting).await;
            }
        }
    });
}

async fn connect_soon(dirs: &Dirs, id: &str) -> Option<(super::Incoming, super::Outgoing)> {
    let deadline = tokio::time::Instant::now() + CONNECT_FOR;
    let mut pause = Duration::from_millis(5);
    loop {
        match super::connect(dirs, id).await {
            Ok(connection) => return Some(connection),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(_) => return None,
        }
    }
}

//! One task per agent with a terminal: it asks the shim for the agent's activity and
//! hands every change to whoever started it (the core). It sleeps in a read between
//! changes, so idle agents cost the daemon no wake-ups.

use grove_proto::console::{FromShim, ToShim};
use grove_proto::paths::Dirs;
use std::future::Future;

/// Monitors agent `id`: `changed(waiting)` at every change of its activity.
pub fn start<F, Told>(dirs: Dirs, id: String, changed: F)
where
    F: Fn(bool) -> Told + Send + 'static,
    Told: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let Some((mut incoming, mut outgoing)) = super::connect(&dirs, &id).await.ok() else {
            tracing::debug!(agent = %id, "no console to monitor");
            return;
        };
        if outgoing.send(&ToShim::Activity).await.is_err() {
            return;
        }
        while let Ok(Some(message)) = incoming.next().await {
            if let FromShim::Activity(waiting) = message {
                changed(waiting).await;
            }
        }
    });
}

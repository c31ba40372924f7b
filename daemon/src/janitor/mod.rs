//! Housekeeping: the start-up scan, the periodic prune, disk pressure. One task owns it,
//! so passes never overlap; removals of agents' worktrees go through the core (which
//! salvages onto the agent's branch), removals of unknown worktrees salvage to
//! `refs/grove/salvage/<dir>`. Every removal is logged with its reason.

mod orphan;
mod pressure;
mod prune;
mod scan;
mod templates;

use crate::config::Config;
use crate::core::CoreHandle;
use crate::db::Db;
use crate::error::Error;
use crate::events::EventBus;
use crate::git::lane::Lanes;
use grove_proto::methods::GcReport;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{interval_at, Instant, MissedTickBehavior};

enum Msg {
    Gc(bool, oneshot::Sender<Result<GcReport, Error>>),
    /// Salvage and remove these unknown worktrees (a killed `grove merge`'s), for a reason.
    Reap(Vec<std::path::PathBuf>, String, oneshot::Sender<()>),
    CheckDisk(oneshot::Sender<Result<(), Error>>),
}

#[derive(Clone)]
pub struct JanitorHandle {
    tx: mpsc::Sender<Msg>,
    scanning: Arc<AtomicBool>,
}

impl JanitorHandle {
    /// True until the start-up scan is done.
    pub fn scanning(&self) -> bool {
        self.scanning.load(Ordering::Relaxed)
    }

    /// Runs the prune pass now (`grove gc`).
    pub async fn gc(&self, dry_run: bool) -> Result<GcReport, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Gc(dry_run, reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Salvages and removes worktrees no record owns (`reason` goes in the removal
    /// log); returns once done. A worktree that cannot be removed stays, logged.
    pub async fn reap(&self, dirs: Vec<std::path::PathBuf>, reason: &str) {
        let (reply, answer) = oneshot::channel();
        if self
            .tx
            .send(Msg::Reap(dirs, reason.to_string(), reply))
            .await
            .is_ok()
        {
            let _ = answer.await;
        }
    }

    /// Checks disk usage (cleaning up if it is high); refuses when it stays high.
    pub async fn check_disk(&self) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::CheckDisk(reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }
}

/// Asks the janitor to salvage and remove `dir` once every process in `pids` (found
/// working in it, with no agent record) has ended: waited for on pidfds, no polling.
fn reap_when_ended(dir: std::path::PathBuf, pids: Vec<u32>, janitor: mpsc::Sender<Msg>) {
    tokio::spawn(async move {
        for pid in pids {
            let _ = crate::supervisor::watch::exited(pid).await;
        }
        let (reply, _) = oneshot::channel();
        let reason = "orphan at start-up: no agent record owns it, its processes ended".into();
        let _ = janitor.send(Msg::Reap(vec![dir], reason, reply)).await;
    });
}

pub struct Janitor {
    core: CoreHandle,
    lanes: Lanes,
    db: Db,
    config: Arc<Config>,
    events: EventBus,
}

impl Janitor {
    pub fn new(
        core: CoreHandle,
        lanes: Lanes,
        db: Db,
        config: Arc<Config>,
        events: EventBus,
    ) -> Janitor {
        Janitor {
            core,
            lanes,
            db,
            config,
            events,
        }
    }

    /// Starts the janitor task: timers for disk checks and prunes, and requests.
    pub fn start(self, mut shutdown: watch::Receiver<bool>) -> JanitorHandle {
        let (tx, mut rx) = mpsc::channel(64);
        let scanning = Arc::new(AtomicBool::new(true));
        let scanned = scanning.clone();
        let reaper = tx.clone();
        tokio::spawn(async move {
            // After the socket opened: requests never wait for it, and the janitor's
            // own passes come after it.
            for (dir, pids) in self.startup_scan().await {
                reap_when_ended(dir, pids, reaper.clone());
            }
            scanned.store(false, Ordering::Relaxed);
            let mut disk_timer = interval_at(
                Instant::now() + self.config.disk_check_interval,
                self.config.disk_check_interval,
            );
            disk_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut prune_timer = interval_at(
                Instant::now() + self.config.prune_first_delay,
                self.config.prune_interval,
            );
            prune_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
            crate::metrics::prune_due(
                grove_proto::now_ms() + self.config.prune_first_delay.as_millis() as u64,
            );
            let stopped = async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            };
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    msg = rx.recv() => match msg {
                        Some(Msg::Gc(dry_run, reply)) => {
                            let _ = reply.send(self.prune(dry_run).await);
                        }
                        Some(Msg::Reap(dirs, reason, reply)) => {
                            let mut freed = false;
                            for dir in dirs {
                                match self.remove_orphan(dir.clone(), reason.clone()).await {
                                    Ok(_) => freed = true,
                                    Err(e) => tracing::warn!(path = %dir.display(), error = %e, "left an unknown worktree"),
                                }
                            }
                            if freed {
                                self.core.slots_freed().await;
                            }
                            let _ = reply.send(());
                        }
                        Some(Msg::CheckDisk(reply)) => {
                            let _ = reply.send(self.relieve_disk_pressure().await);
                        }
                        None => break,
                    },
                    _ = disk_timer.tick() => {
                        self.remove_templates(Some(self.config.pool_idle), "unused").await;
                        let _ = self.relieve_disk_pressure().await;
                    }
                    _ = prune_timer.tick() => {
                        let started = grove_proto::now_ms();
                        if let Err(e) = self.prune(false).await {
                            tracing::error!(error = %e, "prune pass failed");
                        }
                        crate::metrics::prune_ran(started, grove_proto::now_ms() + self.config.prune_interval.as_millis() as u64);
                    }
                    () = &mut stopped => break,
                }
            }
        });
        JanitorHandle { tx, scanning }
    }

    async fn log_removal(&self, removal: grove_proto::types::Removal) {
        self.events.publish(
            "janitor.removed",
            &removal,
            None,
            removal.agent_id.as_deref(),
        );
        tracing::info!(
            path = %removal.path.display(),
            reason = %removal.reason,
            salvage_ref = ?removal.salvage_ref,
            "worktree removed"
        );
        if let Err(e) = self
            .db
            .call(move |conn| crate::db::removals::record(conn, &removal))
            .await
        {
            tracing::error!(error = %e, "cannot log a removal");
        }
    }
}

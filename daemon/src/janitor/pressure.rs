//! Disk pressure: when the filesystem holding the worktree root is fuller than
//! `disk_high`, remove the warm pool and the templates of copy-on-write worktrees, then
//! non-live worktrees oldest first (salvaged) until it is under
//! `disk_low`; while it stays over `disk_high`, hold the queue and refuse spawns.

use super::Janitor;
use crate::error::Error;
use crate::git::pool::is_pool_dir;
use crate::worktree_root::{last_activity, usage, usage_synced, worktree_dirs};
use grove_proto::types::AgentRecord;
use std::collections::HashMap;
use std::path::PathBuf;

impl Janitor {
    pub(super) async fn relieve_disk_pressure(&self) -> Result<(), Error> {
        let root = self.config.dirs.worktree_root.clone();
        let mut used = usage(&root).map_err(Error::io("measure the disk of", &root))?;
        // After a removal: the blocks it freed counted.
        let measure = || usage_synced(&root).map_err(Error::io("measure the disk of", &root));
        if used <= self.config.disk_high {
            self.core.disk_hold(None).await;
            return Ok(());
        }
        tracing::warn!(used = %percent(used), "disk pressure: cleaning up");
        // The warm pool and the templates go first: they hold no one's work.
        self.core.drain_pool(false).await;
        used = measure()?;
        if used >= self.config.disk_low {
            let reason = format!("disk pressure: {} used", percent(used));
            if self.remove_templates(None, &reason).await > 0 {
                used = measure()?;
            }
        }
        let dirs: Vec<PathBuf> = worktree_dirs(&root)
            .into_iter()
            .filter(|d| !is_pool_dir(d))
            .collect();
        let records = self.core.snapshot().await?;
        let owners: HashMap<&PathBuf, &AgentRecord> =
            records.iter().map(|r| (&r.worktree, r)).collect();
        let mut candidates: Vec<PathBuf> = dirs
            .iter()
            .filter(|d| owners.get(d).is_none_or(|r| r.status.is_final()))
            .cloned()
            .collect();
        candidates.sort_by_key(|d| last_activity(d));
        let live = dirs.len() - candidates.len();
        for dir in candidates {
            if used < self.config.disk_low {
                break;
            }
            let reason = format!("disk pressure: {} used", percent(used));
            let owner = owners.get(&dir).copied();
            if let Err(e) = self.remove_worktree(dir, owner, reason, false).await {
                tracing::warn!(error = %e, "disk pressure: could not remove a worktree");
            }
            used = measure()?;
        }
        if used <= self.config.disk_high {
            self.core.disk_hold(None).await;
            return Ok(());
        }
        let why = format!(
            "disk pressure: the filesystem of {} is {} full (threshold {}); grove removed \
             every finished worktree it could and {live} worktrees of live agents remain; \
             free some space or raise disk_high, then spawn again",
            root.display(),
            percent(used),
            percent(self.config.disk_high)
        );
        tracing::warn!("{why}");
        self.events.publish(
            "disk.pressure",
            &serde_json::json!({
                "root": root,
                "used": used,
                "high": self.config.disk_high,
                "live_worktrees": live,
                "message": why,
            }),
            None,
            None,
        );
        self.core.disk_hold(Some(why.clone())).await;
        Err(Error::Refused(why))
    }
}

fn percent(fraction: f64) -> String {
    format!("{:.0}%", fraction * 100.0)
}

//! The prune pass (daily, and `grove gc`): idle worktrees of no live agent, and records
//! past retention.

use super::Janitor;
use crate::error::Error;
use crate::git::pool::is_pool_dir;
use crate::worktree_root::{last_activity, worktree_dirs};
use grove_proto::methods::GcReport;
use grove_proto::now_ms;
use grove_proto::types::{AgentRecord, Removal};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

impl Janitor {
    /// The logs and state directories of agents whose records the core forgot: here,
    /// off the core's turn, since a log can be large.
    async fn remove_agent_dirs(&self, ids: &[String]) {
        let dirs: Vec<PathBuf> = ids
            .iter()
            .map(|id| self.config.dirs.agent_dir(id))
            .collect();
        let removing = tokio::task::spawn_blocking(move || {
            for dir in dirs {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = %dir.display(), error = %e, "cannot remove a forgotten agent's directory");
                    }
                }
            }
        });
        if let Err(e) = removing.await {
            tracing::error!(error = %e, "removing forgotten agents' directories failed");
        }
    }

    pub(super) async fn prune(&self, dry_run: bool) -> Result<GcReport, Error> {
        let dirs = worktree_dirs(&self.config.dirs.worktree_root);
        let records = self.core.snapshot().await?;
        let owners: HashMap<&PathBuf, &AgentRecord> =
            records.iter().map(|r| (&r.worktree, r)).collect();
        let mut report = GcReport {
            dry_run,
            removals: Vec::new(),
            records_deleted: Vec::new(),
            refs_expired: Vec::new(),
            kept: Vec::new(),
        };
        // The warm pool has its own expiry (`pool_idle`), kept by the core.
        for dir in dirs.into_iter().filter(|d| !is_pool_dir(d)) {
            let owner = owners.get(&dir).copied();
            if owner.is_some_and(|r| !r.status.is_final()) {
                continue;
            }
            let idle = SystemTime::now()
                .duration_since(last_activity(&dir))
                .unwrap_or_default();
            if idle < self.config.max_idle {
                continue;
            }
            let reason = format!("prune: idle for {}", humanize(idle));
            match self.remove_worktree(dir, owner, reason, dry_run).await {
                Ok(removal) => report.removals.push(removal),
                Err(e) => {
                    tracing::warn!(error = %e, "prune: skipped a worktree");
                    report.kept.push(e.to_string());
                }
            }
        }
        report.refs_expired = self.expire_discarded_refs(&records, dry_run).await;
        let expired = self.expired_records(&records);
        report.records_deleted = if dry_run || expired.is_empty() {
            expired
        } else {
            self.core.forget(expired).await?
        };
        if !dry_run && !report.records_deleted.is_empty() {
            self.remove_agent_dirs(&report.records_deleted).await;
            tracing::info!(
                count = report.records_deleted.len(),
                "prune: deleted records past retention"
            );
        }
        Ok(report)
    }

    /// Removes one non-live worktree, salvaged first: through the core for an agent's
    /// (onto its branch), directly for an unknown one (onto a salvage ref).
    pub(super) async fn remove_worktree(
        &self,
        dir: PathBuf,
        owner: Option<&AgentRecord>,
        reason: String,
        dry_run: bool,
    ) -> Result<Removal, Error> {
        if dry_run {
            return Ok(Removal {
                at_ms: now_ms(),
                agent_id: owner.map(|r| r.id.clone()),
                repo: owner.map(|r| r.repo.clone()),
                salvage_ref: owner.map(|r| r.branch.clone()),
                salvage_commit: None,
                path: dir,
                reason,
            });
        }
        match owner {
            Some(record) => {
                let done = self.core.remove_kept(&record.id, &reason).await?;
                Ok(Removal {
                    at_ms: now_ms(),
                    path: dir,
                    reason,
                    agent_id: Some(done.id.clone()),
                    repo: Some(done.repo.clone()),
                    salvage_ref: done.branch_exists.then(|| done.branch.clone()),
                    salvage_commit: done.head_commit.clone(),
                })
            }
            None => {
                let removal = self.remove_orphan(dir, reason).await?;
                // The core counts slots from its last listing of the root; this is news
                // to it (an agent's removal went through the core itself).
                self.core.slots_freed().await;
                Ok(removal)
            }
        }
    }

    /// `grove discard` keeps a discarded branch's tip for `retention`; then it goes.
    async fn expire_discarded_refs(&self, records: &[AgentRecord], dry_run: bool) -> Vec<String> {
        let cutoff = SystemTime::now() - self.config.retention;
        let repos: std::collections::BTreeSet<PathBuf> =
            records.iter().map(|r| r.repo.clone()).collect();
        let mut expired = Vec::new();
        for repo in repos {
            let Ok(Ok(target)) =
                tokio::task::spawn_blocking(move || crate::git::target::resolve_repo(&repo)).await
            else {
                continue;
            };
            match self
                .lanes
                .run(&target, move |lane| {
                    crate::git::refs::expire_discarded(lane, cutoff, dry_run)
                })
                .await
            {
                Ok(names) => expired.extend(names),
                Err(e) => tracing::warn!(error = %e, "prune: cannot expire discarded refs"),
            }
        }
        if !dry_run && !expired.is_empty() {
            tracing::info!(refs = ?expired, "prune: expired discarded refs past retention");
        }
        expired
    }

    fn expired_records(&self, records: &[AgentRecord]) -> Vec<String> {
        let cutoff = now_ms().saturating_sub(self.config.retention.as_millis() as u64);
        records
            .iter()
            .filter(|r| r.status.is_final() && !Path::new(&r.worktree).exists())
            .filter(|r| {
                let finished = r
                    .collected_at_ms
                    .or(r.ended_at_ms)
                    .unwrap_or(r.created_at_ms);
                finished < cutoff
            })
            .map(|r| r.id.clone())
            .collect()
    }
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

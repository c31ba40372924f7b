//! The templates of copy-on-write worktrees hold no one's work, only a checkout of a
//! base that the next spawn can clone: disk pressure removes them before any worktree,
//! and one unused for `pool_idle` goes at the next disk check, as an idle warm pool does.

use super::Janitor;
use crate::git::clone_checkout::{remove_template, templates};
use grove_proto::now_ms;
use grove_proto::types::Removal;
use std::time::{Duration, SystemTime};

impl Janitor {
    /// Removes the templates unused for at least `unused_for` (all of them with `None`),
    /// each logged as a removal with `reason`; returns how many went.
    pub(super) async fn remove_templates(
        &self,
        unused_for: Option<Duration>,
        reason: &str,
    ) -> usize {
        let root = self.config.dirs.worktree_root.clone();
        let removing = tokio::task::spawn_blocking(move || {
            let now = SystemTime::now();
            let mut removed = Vec::new();
            for (template, used) in templates(&root) {
                let idle = now.duration_since(used).unwrap_or_default();
                if unused_for.is_some_and(|limit| idle < limit) {
                    continue;
                }
                match remove_template(&template) {
                    Ok(()) => removed.push(template),
                    Err(e) => {
                        tracing::warn!(path = %template.display(), error = %e, "cannot remove a template")
                    }
                }
            }
            removed
        });
        let removed = removing.await.unwrap_or_default();
        for path in &removed {
            self.log_removal(Removal {
                at_ms: now_ms(),
                path: path.clone(),
                reason: format!("{reason} (a template of copy-on-write worktrees)"),
                agent_id: None,
                repo: None,
                salvage_ref: None,
                salvage_commit: None,
            })
            .await;
        }
        removed.len()
    }
}

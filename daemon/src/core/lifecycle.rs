//! An agent's life as the core sees it: registered, prepared, started, exited, collected.

use super::{Core, Msg, Reply};
use crate::error::Error;
use crate::git::authorship::AgentWork;
use crate::git::collect::{finish, salvage, CollectJob, Collected};
use crate::git::target::resolve_repo;
use crate::supervisor::{procfs, watch};
use grove_proto::now_ms;
use grove_proto::shim::{read_exit_record, EXIT_RECORD_FILE};
use grove_proto::types::{AgentRecord, AgentStatus, Removal};
use std::collections::HashSet;
use std::time::Duration;

/// The first pause before a collect that failed for a passing cause runs again, and
/// the longest it doubles to.
const COLLECT_RETRY_FIRST: Duration = Duration::from_secs(1);
const COLLECT_RETRY_LONGEST: Duration = Duration::from_secs(60);

impl Core {
    pub(super) async fn started(&mut self, id: &str, pid: u32) -> Result<AgentRecord, Error> {
        let row = self
            .agents
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} vanished while starting")))?;
        row.record.status = AgentStatus::Running;
        row.record.pid = Some(pid);
        row.record.started_at_ms = Some(now_ms());
        row.pid_start = procfs::start_time(pid);
        let record = row.record.clone();
        self.save(id).await;
        // The shim has the environment now. Wiping it (with a WAL checkpoint) is queued
        // on the database thread rather than waited for by the spawning client.
        self.drop_queued_env_soon(id);
        self.watch_shim(id, pid);
        tracing::info!(agent = id, pid, branch = %record.branch, "agent running");
        self.publish("agent.started", &record);
        Ok(record)
    }

    pub(super) fn watch_shim(&self, id: &str, pid: u32) {
        if self
            .agents
            .get(id)
            .is_some_and(|row| row.record.tty.is_some())
        {
            let (core, agent) = (super::CoreHandle::new(self.tx.clone()), id.to_string());
            crate::console::monitor::start(
                self.config.dirs.clone(),
                id.to_string(),
                move |waiting| {
                    let (core, agent) = (core.clone(), agent.clone());
                    async move { core.activity(&agent, waiting).await }
                },
            );
        }
        let tx = self.tx.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = watch::exited(pid).await {
                tracing::error!(agent = %id, pid, error = %e, "cannot watch shim");
            }
            let _ = tx.send(Msg::ShimExited(id)).await;
        });
    }

    /// The shim is gone: take its exit record (or note that there is none) and collect.
    pub(super) async fn shim_exited(&mut self, id: &str) {
        let exit_path = self.config.dirs.agent_dir(id).join(EXIT_RECORD_FILE);
        // The shim kills the tree and removes the agent's TMPDIR and cgroup; this covers a
        // shim that died first: what it left running is killed before anything is saved.
        match grove_sys::cgroup::kill_stale_cgroup(id) {
            Ok(Some(cgroup)) => {
                tokio::task::spawn_blocking(move || grove_sys::cgroup::remove_when_empty(&cgroup));
            }
            Ok(None) => {
                // No cgroup: the tree went to init with its shim. What still carries
                // the agent's token goes before anything is saved.
                if let Some(token) = self.agents.get(id).map(|row| row.token.clone()) {
                    let killed = tokio::task::spawn_blocking(move || kill_by_token(&token))
                        .await
                        .unwrap_or(0);
                    if killed > 0 {
                        tracing::warn!(
                            agent = id,
                            killed,
                            "killed what the agent's dead shim left running"
                        );
                    }
                }
            }
            Err(e) => {
                tracing::warn!(agent = id, error = %e, "cannot kill what is left in the agent's cgroup")
            }
        }
        // Its TMPDIR goes in the collect task (`start_collect`), off this turn.
        // Its shim unlinks the input once opened; this covers a shim that died first.
        let _ = std::fs::remove_file(
            self.config
                .dirs
                .agent_dir(id)
                .join(super::spawn::STDIN_FILE),
        );
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        if !row.record.status.is_running() {
            // Not collected from here: its TMPDIR goes in a task of its own.
            let tmp = self.config.dirs.agent_dir(id).join("tmp");
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp));
            return;
        }
        let record = &mut row.record;
        match read_exit_record(&exit_path) {
            Ok(Some(exit)) => {
                record.outcome = Some(exit.outcome);
                record.exit_code = exit.exit_code;
                record.exit_signal = exit.exit_signal;
                record.started_at_ms = Some(exit.started_at_ms);
                record.ended_at_ms = Some(exit.ended_at_ms);
                record.error = exit.error;
                record.cpu_ms = exit.cpu_ms;
                record.peak_memory_bytes = exit.peak_memory_bytes;
            }
            Ok(None) => {
                record.ended_at_ms = Some(now_ms());
                record.error = Some("the agent's process vanished without an exit record".into());
            }
            Err(e) => {
                record.ended_at_ms = Some(now_ms());
                record.error = Some(format!(
                    "unreadable exit record {}: {e}",
                    exit_path.display()
                ));
            }
        }
        record.status = AgentStatus::Exited;
        // Nobody is left to hear an answer; its waiting asks end with the agent.
        record.question = None;
        record.activity = None;
        self.askers.remove(id);
        self.withdrawn.remove(id);
        tracing::info!(agent = id, outcome = ?record.outcome, "agent exited");
        let exited = record.clone();
        // The collect runs while the exit is saved: it is reported (`collected`) on a
        // later turn, after this one's save, and one a crash cuts short runs again from
        // the exit record.
        self.start_collect(id, None);
        self.save(id).await;
        self.publish("agent.exited", &exited);
    }

    /// A collect failed for a cause that passes (no space, a busy file): the work is
    /// still only in the worktree, so the agent stays `exited` (not final: `wait` keeps
    /// waiting) and the collect runs again after a pause that doubles up to a minute.
    async fn collect_later(&mut self, id: &str, e: &Error) {
        let why = self.removal_reasons.remove(id);
        let tries = self.collect_retries.entry(id.to_string()).or_default();
        *tries += 1;
        let pause = COLLECT_RETRY_FIRST * 2u32.pow((*tries - 1).min(6));
        let pause = pause.min(COLLECT_RETRY_LONGEST);
        tracing::warn!(agent = id, error = %e, tries = *tries, retry_in_s = pause.as_secs(), "collect failed for now; trying again");
        let note = format!(
            "collect failed for now: {e}; grove tries again in {}s, the work stays in the \
             worktree until then",
            pause.as_secs()
        );
        if let Some(row) = self.agents.get_mut(id) {
            row.record.salvage_error = Some(note.clone());
        }
        self.save(id).await;
        if let Some(reply) = self.pending_removals.remove(id) {
            let _ = reply.send(Err(Error::InvalidState(format!("not removed yet: {note}"))));
        }
        let removal = why.filter(|why| why != "collect" && why != "lost");
        let (tx, id) = (self.tx.clone(), id.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            let _ = tx.send(Msg::RetryCollect(id, removal)).await;
        });
    }

    pub(super) fn retry_collect(&mut self, id: &str, removal: Option<String>) {
        let due = self
            .agents
            .get(id)
            .is_some_and(|row| row.record.status == AgentStatus::Exited);
        if due {
            self.start_collect(id, removal);
        }
    }

    /// Collects the agent in its repository's lane. `removal` overrides `keep` and names
    /// why the worktree goes (rm, prune, disk pressure).
    pub(super) fn start_collect(&mut self, id: &str, removal: Option<String>) {
        let Some(record) = self.agents.get(id).map(|row| row.record.clone()) else {
            return;
        };
        let keep = record.keep && removal.is_none();
        // A removal asked for (rm, prune, disk pressure) is answered once the space is
        // free: disk pressure measures again right after.
        let delete_before_reporting = removal.is_some();
        let why = removal.unwrap_or_else(|| match record.outcome {
            Some(_) => "collect".into(),
            None => "lost".into(),
        });
        let job = CollectJob {
            placed: record.placed.clone(),
            agent_id: record.id.clone(),
            worktree: record.worktree.clone(),
            branch: record.branch.clone(),
            base_commit: record.base_commit.clone(),
            keep,
            message: crate::git::authorship::message(&AgentWork {
                id: &record.id,
                name: record.name.as_deref(),
                argv: &record.argv,
                report: record.report.as_deref(),
                removed: (record.status != AgentStatus::Exited).then_some(why.as_str()),
            }),
            author: self.config.commit_author,
            jailed: record.jail,
            sparse: record.sparse.clone(),
            scratch: self.config.dirs.agent_dir(&record.id).join("salvage.git"),
            max_file: self.config.salvage_max_file,
            head_commit: record.head_commit.clone(),
            time_s: record.ended_at_ms.unwrap_or(record.created_at_ms) / 1000,
            code_store: record
                .jail
                .then(|| crate::git::code_store::path(&self.config.dirs.agent_dir(&record.id))),
        };
        self.removal_reasons.insert(id.to_string(), why);
        let lanes = self.lanes.clone();
        let tx = self.tx.clone();
        let salvages = self.salvages.clone();
        let span = tracing::info_span!("agent", id = %record.id, repo = %record.repo.display());
        let tmp = self.config.dirs.agent_dir(&record.id).join("tmp");
        let ledger = crate::supervisor::cli_trust::ledger_path(&self.config.dirs.state_dir, id);
        let collect = async move {
            // Before the collect is reported: the agent's TMPDIR is gone once it is.
            let removing = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp));
            if let Ok(Err(e)) = removing.await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, "cannot remove the agent's TMPDIR");
                }
            }
            let result = async {
                let repo = record.repo.clone();
                let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await??;
                // Hashing the worktree happens here, outside the repository's lane.
                let common = target.common_dir.clone();
                let (job, staged) = salvages
                    .run(move || {
                        let staged = salvage(&common, &job);
                        (job, staged)
                    })
                    .await?;
                let staged = staged?;
                let mut done = lanes
                    .run(&target, move |lane| finish(lane, &job, staged))
                    .await?;
                let trash = done.trash.take();
                Ok((done, trash))
            }
            .await;
            tracing::debug!(ok = result.is_ok(), "collected");
            let (result, trash) = match result {
                Ok((done, trash)) => (Ok(done), trash),
                Err(e) => (Err(e), None),
            };
            match trash {
                // Asked for to free space: answered once it is free.
                Some(trash) if delete_before_reporting => {
                    let _ = tokio::task::spawn_blocking(move || trash.delete()).await;
                }
                // Off every critical path: the lane goes on with the next collect or
                // preparation at once.
                Some(trash) => lanes.deleter().delete(trash),
                None => {}
            }
            // The CLI's trust entry for the worktree goes with it (none while it is kept).
            let release = move || {
                crate::faults::point("before_trust_release");
                crate::supervisor::cli_trust::release(&ledger)
            };
            let _ = tokio::task::spawn_blocking(release).await;
            let _ = tx.send(Msg::Collected(record.id, result)).await;
        };
        tokio::spawn(tracing::Instrument::instrument(collect, span));
    }

    pub(super) async fn collected(&mut self, id: &str, result: Result<Collected, Error>) {
        self.recovering.remove(id);
        let result = match result {
            Err(e) if e.passes() => return self.collect_later(id, &e).await,
            result => result,
        };
        self.collect_retries.remove(id);
        crate::metrics::collected(&result, |done| done.salvaged);
        let live_index = self.config.dirs.agent_dir(id);
        let _ = std::fs::remove_file(live_index.join(crate::git::LIVE_DIFF_INDEX));
        crate::sessions::code::forget(&live_index);
        let why = self
            .removal_reasons
            .remove(id)
            .unwrap_or_else(|| "collect".into());
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        let record = &mut row.record;
        let max_file = self.config.salvage_max_file;
        let mut removal = None;
        match result {
            Ok(done) => {
                record.head_commit = done.head_commit.clone();
                record.files_changed = Some(done.files_changed);
                record.insertions = Some(done.insertions);
                record.deletions = Some(done.deletions);
                record.branch_exists = done.branch_exists;
                record.salvaged = record.salvaged || done.salvaged;
                let kept = record.worktree.display().to_string();
                record.salvage_error = if let Some(object) = &done.oversized {
                    Some(format!(
                        "its branch holds an object over salvage_max_file ({max_file} bytes): \
                         {object}; nothing of it was brought into your repository. Its own \
                         repository is kept at {kept}: look with `git -C {kept} log`, and \
                         bring it in with `git fetch {kept} {branch}:{branch}` if you want it",
                        branch = record.branch
                    ))
                } else if !done.left_out.is_empty() {
                    Some(format!(
                        "left out {} file(s) over salvage_max_file ({} bytes): {}; \
                         the worktree is kept at {kept}",
                        done.left_out.len(),
                        max_file,
                        done.left_out.join(", ")
                    ))
                } else {
                    None
                };
                if !done.code_brought.is_empty() {
                    crate::sessions::code::tidy_brought_later(
                        self.db.clone(),
                        record.repo.clone(),
                        done.code_brought.clone(),
                    );
                }
                if !done.code_left_out.is_empty() {
                    let note = format!(
                        "checkpoint code kept out of your repository: {}",
                        done.code_left_out.join("; ")
                    );
                    tracing::warn!(agent = id, %note);
                    record.salvage_error = Some(match record.salvage_error.take() {
                        Some(before) => format!("{before}; {note}"),
                        None => note,
                    });
                }
                if let Some(problem) = &done.tampered {
                    tracing::warn!(agent = id, problem = %problem, "the agent changed grove's git layout; worktree kept");
                    record.tampered = true;
                    record.error = Some(format!(
                        "tampered: {problem}; grove did not salvage through it and kept \
                         the worktree at {kept}"
                    ));
                }
                if done.removed {
                    record.keep = false;
                    removal = Some(Removal {
                        at_ms: now_ms(),
                        path: record.worktree.clone(),
                        reason: why,
                        agent_id: Some(record.id.clone()),
                        repo: Some(record.repo.clone()),
                        salvage_ref: done.branch_exists.then(|| record.branch.clone()),
                        salvage_commit: done.head_commit,
                    });
                }
            }
            Err(e) => {
                // The worktree stays where it is: nothing is removed without salvage.
                tracing::error!(agent = id, error = %e, "collect failed; worktree kept");
                let note = format!("collect failed, worktree kept: {e}");
                record.salvage_error = Some(note.clone());
                record.error = Some(with_collect_note(record.error.take(), &note));
            }
        }
        if !record.status.is_final() {
            record.collected_at_ms = Some(now_ms());
            record.status = if record.outcome.is_some() {
                AgentStatus::Collected
            } else {
                crate::metrics::agent_lost();
                AgentStatus::Lost
            };
        }
        let record = record.clone();
        tracing::info!(agent = id, status = %record.status, "agent collected");
        self.save(id).await;
        self.publish("agent.collected", &record);
        if let Some(removal) = removal {
            tracing::info!(path = %removal.path.display(), reason = %removal.reason, "worktree removed");
            self.events.publish(
                "janitor.removed",
                &removal,
                Some(&record.session),
                Some(&record.id),
            );
            let _ = self
                .db
                .call(move |conn| crate::db::removals::record(conn, &removal))
                .await;
        }
        self.notify_finished(id);
        if let Some(reply) = self.pending_removals.remove(id) {
            // `grove rm` and the janitor say "removed" only for what was removed.
            let answer = if record.worktree.exists() {
                Err(Error::InvalidState(format!(
                    "{} was not removed: {}",
                    record.worktree.display(),
                    record
                        .salvage_error
                        .clone()
                        .or_else(|| record.error.clone())
                        .unwrap_or_else(|| "it is kept".into())
                )))
            } else {
                Ok(record)
            };
            let _ = reply.send(answer);
        }
        self.admit_queued().await;
    }

    /// Removes the kept worktree of a finished agent, salvaged first (`grove rm`, prune).
    pub(super) fn remove_kept(&mut self, prefix: &str, reason: String, reply: Reply<AgentRecord>) {
        let record = match self.resolve(prefix) {
            Ok(row) => row.record.clone(),
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if !record.status.is_final() {
            let _ = reply.send(Err(Error::InvalidState(format!(
                "agent {} is {}; kill it first (`grove kill {}`)",
                record.id, record.status, record.id
            ))));
            return;
        }
        if !record.worktree.exists() || self.pending_removals.contains_key(&record.id) {
            let _ = reply.send(Err(Error::InvalidState(format!(
                "agent {} has no worktree left to remove",
                record.id
            ))));
            return;
        }
        self.pending_removals.insert(record.id.clone(), reply);
        self.start_collect(&record.id, Some(reason));
    }

    /// Deletes the records of finished agents; their automatic sessions too when
    /// `sessions` (the caller removes their directories).
    pub(super) async fn forget(
        &mut self,
        ids: Vec<String>,
        sessions: bool,
    ) -> Result<Vec<String>, Error> {
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                self.agents.get(id).is_some_and(|row| {
                    row.record.status.is_final() && !row.record.worktree.exists()
                })
            })
            .collect();
        let ids = self.keep_session_owners(ids);
        let owned = ids.clone();
        self.db
            .call(move |conn| crate::db::agents::delete_many(conn, &owned))
            .await?;
        let mut own_sessions = Vec::new();
        for id in &ids {
            if let Some(row) = self.agents.remove(id) {
                // Its own session, or the one of the agent that spawned it into that
                // agent's own session.
                let record = row.record;
                let own = record.session == record.id
                    || record.parent.as_deref() == Some(record.session.as_str());
                if own && !own_sessions.contains(&record.session) {
                    own_sessions.push(record.session);
                }
            }
        }
        // Their directories go in the janitor, off this turn (janitor/prune.rs).
        if sessions {
            self.forget_own_sessions(own_sessions).await;
        }
        Ok(ids)
    }

    /// Of `ids`, those whose record may go now: an agent whose automatic session an
    /// agent staying on record still uses (a child, a grandchild...) keeps its record
    /// until the last of them goes, because the record is what says the session was
    /// automatic and goes with it.
    fn keep_session_owners(&self, ids: Vec<String>) -> Vec<String> {
        let going: HashSet<&str> = ids.iter().map(String::as_str).collect();
        // One pass over the table, however many records go.
        let still_used: HashSet<&str> = self
            .agents
            .values()
            .filter(|row| !going.contains(row.record.id.as_str()))
            .map(|row| row.record.session.as_str())
            .collect();
        let kept: HashSet<String> = ids
            .iter()
            .filter(|id| still_used.contains(id.as_str()))
            .cloned()
            .collect();
        ids.into_iter().filter(|id| !kept.contains(id)).collect()
    }

    /// The automatic session of an agent goes with its record, once no agent left in
    /// the table uses it (its children write to it too); an audit row says so.
    async fn forget_own_sessions(&mut self, sessions: Vec<String>) {
        for session in sessions {
            if self
                .agents
                .values()
                .any(|row| row.record.session == session)
            {
                continue;
            }
            let reason = "retention: its agent's record was deleted";
            match self
                .state
                .remove(&session, "grove", reason, Vec::new())
                .await
            {
                Ok(_) | Err(Error::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(session = %session, error = %e, "cannot delete an agent's own session at retention")
                }
            }
        }
    }
}

/// The salvages that may run at once (see `Core::salvages`).
#[derive(Clone)]
pub(super) struct Salvages {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    total: usize,
}

impl Salvages {
    pub(super) fn new(total: usize) -> Salvages {
        let total = total.max(1);
        Salvages {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(total)),
            total,
        }
    }

    /// Runs a salvage once a permit is free. The last of a burst hands the allocator's
    /// free memory back: what the salvages held is free by then, and glibc would keep
    /// it (the daemon stayed at 36 MiB idle after 20 collects on a big repo).
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Error> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let salvages = self.clone();
        let done = tokio::task::spawn_blocking(move || {
            let done = work();
            drop(permit);
            if salvages.permits.available_permits() == salvages.total {
                grove_sys::memory::release_free_heap();
            }
            done
        })
        .await?;
        Ok(done)
    }
}

/// The agent's error with the latest collect failure: a failure of an earlier collect
/// (a disk-pressure pass tries again) is replaced, not repeated, so the error never grows
/// by one identical sentence per pass.
fn with_collect_note(previous: Option<String>, note: &str) -> String {
    const MARK: &str = "collect failed, worktree kept: ";
    match previous {
        None => note.to_string(),
        Some(previous) => match previous.find(MARK) {
            Some(0) => note.to_string(),
            Some(at) => format!("{}; {note}", previous[..at].trim_end_matches("; ")),
            None => format!("{previous}; {note}"),
        },
    }
}

/// The claim and abandon markers of one start attempt (see `ShimSpec::claim`).
pub(super) fn start_markers(
    agent_dir: &std::path::Path,
    attempt: u32,
) -> (std::path::PathBuf, std::path::PathBuf) {
    (
        agent_dir.join(format!("start-{attempt}.claim")),
        agent_dir.join(format!("start-{attempt}.abandon")),
    )
}

/// Kills every process whose environment carries the agent's token, and waits for them
/// to end: the tree of a shim that died without a cgroup (its processes went to init).
/// A process that dropped the token from its environment escapes this; the cgroup
/// (which `--jail` requires) does not let it. Returns how many were killed.
fn kill_by_token(token: &str) -> usize {
    let entry = format!("GROVE_TOKEN={token}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    grove_sys::supervise::kill_marked(entry.as_bytes(), deadline).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot kill what a lost agent left running");
        0
    })
}

#[cfg(test)]
mod tests {
    use super::with_collect_note;

    #[test]
    fn a_repeated_collect_failure_replaces_the_last_one() {
        let note = "collect failed, worktree kept: disk full";
        let once = with_collect_note(Some("exit 1".into()), note);
        assert_eq!(once, "exit 1; collect failed, worktree kept: disk full");
        assert_eq!(with_collect_note(Some(once.clone()), note), once);
        let other = "collect failed, worktree kept: locked";
        assert_eq!(
            with_collect_note(Some(once), other),
            "exit 1; collect failed, worktree kept: locked"
        );
        assert_eq!(with_collect_note(None, note), note);
        assert_eq!(with_collect_note(Some(note.into()), other), other);
    }
}

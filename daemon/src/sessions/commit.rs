//! Applying updates and storing them in groups: an update is applied in memory and put
//! in the outbox at once; the database thread stores everything in the outbox in one
//! transaction (and fsyncs it) while the next group is applied, then each update is
//! acknowledged in order. A failed group puts the sessions back as they are stored.

use super::requests::{batch_error, Writer};
use super::*;

/// Updates applied in memory and not yet stored, shared with the database thread: a
/// store job takes everything in it when it starts. The state task keeps applying
/// updates and putting them here while the database thread stores (and fsyncs) the
/// group before; the first of them queues the next store job at once, so that the
/// database thread goes from one commit to the next without waiting for this task.
#[derive(Default)]
pub(super) struct Outbox {
    checkpoints: Vec<CheckpointRow>,
    /// Where each session with checkpoints here stands after them.
    heads: HashMap<String, SessionHead>,
    /// Compactions that came due, stored with the next group.
    compactions: Vec<Compaction>,
    /// Sequence number of the last checkpoint put here.
    last: u64,
    /// A store job is queued and has not taken its group yet.
    job_queued: bool,
    /// A group could not be stored: nothing more is, until the state task has put the
    /// sessions back as they are stored.
    failed: bool,
}

impl Outbox {
    /// Queues a compaction for the next group; a head of its session still here
    /// (stored before the compaction, in the same transaction) says the new start too.
    pub(super) fn compact(&mut self, compaction: Compaction) {
        if let Some(head) = self.heads.get_mut(&compaction.session) {
            head.oldest = compaction.oldest;
        }
        self.compactions.push(compaction);
    }
}

/// What one store job did.
pub(super) enum Stored {
    /// Stored everything put in the outbox up to this sequence number, and the
    /// compactions with it: the checkpoint refs they leave to drop, and the bytes
    /// they took from each writer's stored checkpoints.
    Through(u64, Vec<DroppedCode>, budget::WriterBytes),
    /// Found nothing to store (or stored nothing, after a failure).
    Nothing,
    /// Stored nothing: the cause, shared by every update of the group, and the
    /// sessions whose compaction went with it.
    Failed(Arc<Error>, Vec<String>),
}

pub(super) type StoreJob = Pin<Box<dyn Future<Output = Stored> + Send>>;

/// An update applied in memory, waiting for its store job.
pub(super) struct Pending {
    pub(super) seq: u64,
    pub(super) reply: Reply<u64>,
    pub(super) checkpoint: u64,
    pub(super) event: StateEvent,
    /// The tree this update was counted against, and how much: given back if it is
    /// not stored.
    pub(super) charged: Option<(String, u64)>,
}

/// The result of the oldest store job; never, when there is none.
pub(super) async fn next_stored(jobs: &mut VecDeque<StoreJob>) -> Stored {
    match jobs.front_mut() {
        Some(job) => {
            let stored = job.as_mut().await;
            jobs.pop_front();
            stored
        }
        None => std::future::pending().await,
    }
}

/// Runs on the database thread: stores everything in the outbox in one transaction.
pub(super) fn store_job(conn: &mut rusqlite::Connection, outbox: &Mutex<Outbox>) -> Stored {
    let (checkpoints, heads, compactions, through) = {
        let Ok(mut outbox) = outbox.lock() else {
            let error = Arc::new(Error::Poisoned("the state outbox"));
            return Stored::Failed(error, Vec::new());
        };
        outbox.job_queued = false;
        if outbox.failed || (outbox.checkpoints.is_empty() && outbox.compactions.is_empty()) {
            return Stored::Nothing;
        }
        let heads: Vec<SessionHead> = outbox.heads.drain().map(|(_, head)| head).collect();
        (
            std::mem::take(&mut outbox.checkpoints),
            heads,
            std::mem::take(&mut outbox.compactions),
            outbox.last,
        )
    };
    match store::commit_group(conn, &checkpoints, &heads, &compactions) {
        Ok((dropped, freed)) => Stored::Through(through, dropped, freed),
        Err(e) => {
            // Answered as a value, not an error: the database thread's own note of a
            // failed write (`Db::call`) does not see it.
            crate::db::mark::note_failed_write(conn, &e);
            if let Ok(mut outbox) = outbox.lock() {
                outbox.failed = true;
            }
            let compacted = compactions.into_iter().map(|c| c.session).collect();
            Stored::Failed(Arc::new(Error::Db(e.into())), compacted)
        }
    }
}

impl StateService {
    /// Queues a store job on the database thread unless one is queued already.
    pub(super) fn queue_store_job(&mut self, outbox: &mut Outbox) {
        if outbox.job_queued {
            return;
        }
        outbox.job_queued = true;
        let shared = self.outbox.clone();
        // Queued now, not when polled: it runs right after the job before it.
        let job = self.db.submit(move |conn| Ok(store_job(conn, &shared)));
        self.jobs.push_back(Box::pin(async move {
            job.await
                .unwrap_or_else(|e| Stored::Failed(Arc::new(Error::Db(e)), Vec::new()))
        }));
    }

    /// Acknowledges what a store job stored; after a failure, fails everything applied
    /// and not stored, and puts the sessions back as they are stored.
    pub(super) async fn stored(&mut self, stored: Stored) {
        match stored {
            Stored::Nothing => {}
            Stored::Through(through, dropped, freed) => {
                self.budget.stored(&freed);
                while self.pending.front().is_some_and(|p| p.seq <= through) {
                    let Some(done) = self.pending.pop_front() else {
                        break;
                    };
                    let _ = done.reply.send(Ok(done.checkpoint));
                    let event = done.event;
                    self.events.publish(
                        "state.updated",
                        &event,
                        Some(&event.session),
                        Some(&event.writer),
                    );
                }
                for code in dropped {
                    code::drop_refs_later(code);
                }
            }
            Stored::Failed(e, compacted) => self.recover(e, compacted).await,
        }
    }

    /// `touched`: sessions whose compaction failed (their first checkpoint in memory is
    /// not the stored one).
    pub(super) async fn recover(&mut self, error: Arc<Error>, mut touched: Vec<String>) {
        tracing::error!(%error, "cannot store state updates; nothing applied");
        for failed in self.pending.drain(..) {
            if !touched.contains(&failed.event.session) {
                touched.push(failed.event.session.clone());
            }
            if let Some((tree, bytes)) = &failed.charged {
                self.budget.refund(tree, *bytes);
            }
            let _ = failed.reply.send(Err(Error::NotStored(error.clone())));
        }
        if let Ok(mut outbox) = self.outbox.lock() {
            outbox.checkpoints.clear();
            outbox.heads.clear();
            touched.extend(outbox.compactions.drain(..).map(|c| c.session));
        }
        touched.sort();
        touched.dedup();
        // Jobs still queued find `failed` set and store nothing.
        while let Some(job) = self.jobs.pop_front() {
            job.await;
        }
        for name in touched {
            if let Err(e) = self.reload(&name).await {
                tracing::error!(session = %name, error = %e, "cannot reload a session");
                // What it holds in memory is not what is stored: refuse it until a
                // restart reads it again.
                if let Some(session) = self.sessions.get_mut(&name) {
                    session.unreadable = Some(format!(
                        "session `{name}` could not be read back after a failed write ({e}); \
                         restart the daemon (`grove daemon restart`)"
                    ));
                }
            }
        }
        if let Ok(mut outbox) = self.outbox.lock() {
            outbox.failed = false;
        }
    }

    /// Puts a session back as it is stored.
    pub(super) async fn reload(&mut self, name: &str) -> Result<(), Error> {
        let owned = name.to_string();
        let row = self
            .db
            .call(move |conn| store::load_session(conn, &owned))
            .await?;
        match row {
            Some(row) => {
                let mut session = load(&self.db, row).await?;
                let owned = name.to_string();
                session.pins = self
                    .db
                    .call(move |conn| store::session_pins(conn, &owned))
                    .await?;
                self.sessions.insert(name.to_string(), session);
            }
            None => {
                self.sessions.remove(name);
            }
        }
        Ok(())
    }

    /// Stores everything applied so far and acknowledges it.
    pub(super) async fn drain(&mut self) {
        while let Some(job) = self.jobs.front_mut() {
            let stored = job.as_mut().await;
            self.jobs.pop_front();
            self.stored(stored).await;
        }
    }

    /// Applies one batch in memory and puts it in the outbox for the next store job.
    pub(super) fn stage(
        &mut self,
        name: &str,
        by: Writer<'_>,
        writes: &[Write],
        key: Option<String>,
        code: Option<CodeRef>,
        reply: Reply<u64>,
    ) {
        let writer = by.id;
        if let Err(e) = self.session(name) {
            let _ = reply.send(Err(e));
            return;
        }
        if let Err(e) = check_write_size(writes, self.limits) {
            let _ = reply.send(Err(e));
            return;
        }
        let limits = self.limits;
        let Some(session) = self.sessions.get_mut(name) else {
            return;
        };
        let applied = apply_batch(
            &session.schema,
            &session.current,
            writes,
            writer,
            &session.last_changes,
        );
        let state = match applied {
            Ok(state) => state,
            Err(e) => {
                let _ = reply.send(Err(batch_error(e)));
                return;
            }
        };
        let channels = channels_written(writes);
        let channel_bytes = match check_session_size(session, &state, &channels, limits) {
            Ok(sizes) => sizes,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let id = session.head + 1;
        let at_ms = now_ms();
        let mut last_changes = session.last_changes.clone();
        for channel in &channels {
            let change = grove_state::LastChange::after(last_changes.get(channel), id, writer);
            last_changes.insert(channel.clone(), change);
        }
        let oldest = session.oldest.max(1);
        let info = CheckpointInfo {
            id,
            parent: (id > 1).then_some(id - 1),
            parent_session: None,
            at_ms,
            writer: writer.to_string(),
            source: "update".into(),
            channels: channels.clone(),
            schema_version: session.schema_version,
            code,
        };
        let snapshot = (id % SNAPSHOT_EVERY == 0).then_some(&state);
        let rows = CheckpointRow::new(name, info, writes, snapshot).and_then(|row| {
            let row = row.with_key(key);
            SessionHead::new(
                name,
                id,
                oldest,
                Some(at_ms),
                &last_changes,
                session::state_bytes(
                    session
                        .channel_bytes
                        .iter()
                        .filter(|(c, _)| !channels.contains(c))
                        .map(|(_, b)| *b)
                        .chain(channel_bytes.iter().map(|(_, b)| *b)),
                ),
            )
            .map(|head| (row, head))
        });
        let (row, head) = match rows {
            Ok(rows) => rows,
            Err(e) => {
                let _ = reply.send(Err(Error::Encode {
                    what: "the batch",
                    source: e,
                }));
                return;
            }
        };
        // Last of the checks: a write refused by another counts nothing.
        let charged = by.tree.map(|tree| (tree.to_string(), row.bytes()));
        if let Some((tree, bytes)) = &charged {
            if let Err(e) = self.budget.charge(tree, writer, *bytes) {
                let _ = reply.send(Err(e));
                return;
            }
        }
        session.last_changes = last_changes;
        session.reserved = false;
        session.current = state;
        session.last_used_ms = at_ms;
        session.channel_bytes.extend(channel_bytes);
        session.head = id;
        session.oldest = oldest;
        session.last_at_ms = Some(at_ms);
        let outbox = self.outbox.clone();
        let Ok(mut outbox) = outbox.lock() else {
            if let Some((tree, bytes)) = &charged {
                self.budget.refund(tree, *bytes);
            }
            let _ = reply.send(Err(Error::Poisoned("the state outbox")));
            return;
        };
        outbox.last += 1;
        outbox.checkpoints.push(row);
        outbox.heads.insert(name.to_string(), head);
        self.pending.push_back(Pending {
            seq: outbox.last,
            reply,
            checkpoint: id,
            event: StateEvent {
                session: name.to_string(),
                checkpoint: id,
                writer: writer.to_string(),
                channels,
                at_ms,
            },
            charged,
        });
        self.queue_store_job(&mut outbox);
    }
}

/// Checkpoints beyond `checkpoint_keep` are compacted once this many more accumulate,
/// not after every write: each compaction waits for the stored head.
pub(super) const COMPACT_SLACK: u64 = 64;

/// A batch over `state_max_write` is refused before it is applied.
pub(super) fn check_write_size(writes: &[Write], limits: StateLimits) -> Result<(), Error> {
    let bytes = session::json_bytes(writes);
    if bytes > limits.max_write {
        return Err(Error::Refused(format!(
            "the batch is {bytes} bytes of JSON, over the per-write limit of {} bytes \
             (setting `state_max_write`); nothing was written: split it into smaller batches \
             or raise the setting",
            limits.max_write
        )));
    }
    Ok(())
}

/// The new sizes of the written channels, unless the state would grow past
/// `state_max_session`. A state already over it (stored before the limit) may shrink.
pub(super) fn check_session_size(
    session: &Session,
    state: &State,
    channels: &[String],
    limits: StateLimits,
) -> Result<Vec<(String, u64)>, Error> {
    let sizes: Vec<(String, u64)> = channels
        .iter()
        .map(|c| {
            let bytes = state.get(c).map_or(0, |v| session::entry_bytes(c, v));
            (c.clone(), bytes)
        })
        .collect();
    let before = session.state_bytes();
    let unchanged = session
        .channel_bytes
        .iter()
        .filter(|(c, _)| !channels.contains(c))
        .map(|(_, b)| *b);
    let after = session::state_bytes(unchanged.chain(sizes.iter().map(|(_, b)| *b)));
    if after > limits.max_session && after > before {
        return Err(Error::Refused(format!(
            "after this batch session `{}` would hold {after} bytes of state, over the \
             per-session limit of {} bytes (setting `state_max_session`); nothing was \
             written: replace a large channel with {{\"__overwrite__\": value}}, use a new \
             session, or raise the setting",
            session.name, limits.max_session
        )));
    }
    Ok(sizes)
}

//! Sessions and their shared state. One task owns every session's head state; updates
//! are applied one by one in arrival order, and those applied while the database
//! stores the group before them are stored together in one transaction (group commit),
//! then acknowledged: throughput without giving up "an acknowledged batch is durable".
//! The task never waits for the disk while updates arrive: it applies the next group
//! while the database thread stores (and fsyncs) the one before.

pub mod code;
pub mod gc;
mod migrate;
mod session;
mod store;

use crate::config::StateLimits;
use crate::db::Db;
use crate::error::Error;
use crate::events::EventBus;
use grove_agent_shim::now_ms;
use grove_proto::state::{CheckpointInfo, CodeRef, SessionInfo, SessionRemoval};
use grove_state::{apply_batch, channels_written, BatchError, Schema, State, Write};
use serde::Serialize;
pub use session::json_bytes;
use session::Session;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use store::{CheckpointRow, SessionHead, SNAPSHOT_EVERY};
use tokio::sync::{mpsc, oneshot, watch};

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// Most updates applied and not yet stored (and so most in one transaction).
const MAX_PENDING: usize = 512;

/// One applied batch, as `state.watch` subscribers see it.
#[derive(Debug, Clone, Serialize)]
pub struct StateEvent {
    pub session: String,
    pub checkpoint: u64,
    pub writer: String,
    pub channels: Vec<String>,
    pub at_ms: u64,
}

enum Req {
    Update {
        session: String,
        writer: String,
        writes: Vec<Write>,
        key: Option<String>,
        code: Option<CodeRef>,
        reply: Reply<u64>,
    },
    Ensure {
        name: String,
        schema: Option<Schema>,
        explicit: bool,
        reserve: bool,
        reply: Reply<()>,
    },
    Get {
        session: String,
        at: Option<u64>,
        reply: Reply<(u64, State)>,
    },
    History {
        session: String,
        limit: u32,
        before: Option<u64>,
        reply: Reply<Vec<CheckpointInfo>>,
    },
    Pin {
        session: String,
        at: u64,
        pinned: bool,
        reply: Reply<Vec<u64>>,
    },
    Fork {
        session: String,
        at: u64,
        new_session: String,
        writer: String,
        reply: Reply<SessionInfo>,
    },
    Compact {
        session: String,
        keep: u64,
        reply: Reply<(u64, u64)>,
    },
    Info {
        name: String,
        reply: Reply<SessionInfo>,
    },
    List {
        reply: Reply<Vec<SessionInfo>>,
    },
    Remove {
        name: String,
        by: String,
        reason: String,
        live_agents: Vec<String>,
        reply: Reply<SessionRemoval>,
    },
    Migrate {
        name: String,
        schema: Schema,
        drop: Vec<String>,
        reply: Reply<grove_proto::methods::SessionMigrateResult>,
    },
    Gc {
        live: std::collections::HashSet<String>,
        lifecycle: crate::config::SessionLifecycle,
        reply: Reply<gc::GcReport>,
    },
    /// Forget a session that never got a checkpoint (its only agent never started).
    DropUnused {
        name: String,
    },
}

#[derive(Clone)]
pub struct StateHandle {
    tx: mpsc::Sender<Req>,
    db: Db,
}

impl StateHandle {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Req) -> Result<T, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Applies one batch; returns its checkpoint once it is durable. `code` is what
    /// an agent writer had (see `code::record`).
    pub async fn update(
        &self,
        session: &str,
        writer: &str,
        writes: Vec<Write>,
        key: Option<String>,
        code: Option<CodeRef>,
    ) -> Result<u64, Error> {
        self.ask(|reply| Req::Update {
            session: session.into(),
            writer: writer.into(),
            writes,
            key,
            code,
            reply,
        })
        .await
    }

    /// Creates the session unless it exists. With `explicit`, an existing session with
    /// another schema is an error (the caller asked for that schema).
    pub async fn ensure(
        &self,
        name: &str,
        schema: Option<Schema>,
        explicit: bool,
    ) -> Result<(), Error> {
        self.ask(|reply| Req::Ensure {
            name: name.into(),
            schema,
            explicit,
            reserve: false,
            reply,
        })
        .await
    }

    /// Reserves an agent's automatic session: stored with its schema, listed nowhere
    /// and left alone by the GC pass until the agent first writes it.
    pub async fn reserve(&self, name: &str, schema: Option<Schema>) -> Result<(), Error> {
        self.ask(|reply| Req::Ensure {
            name: name.into(),
            schema,
            explicit: false,
            reserve: true,
            reply,
        })
        .await
    }

    pub async fn get(&self, session: &str, at: Option<u64>) -> Result<(u64, State), Error> {
        self.ask(|reply| Req::Get {
            session: session.into(),
            at,
            reply,
        })
        .await
    }

    /// The newest `limit` checkpoints older than `before`, newest first.
    pub async fn history(
        &self,
        session: &str,
        limit: u32,
        before: Option<u64>,
    ) -> Result<Vec<CheckpointInfo>, Error> {
        self.ask(|reply| Req::History {
            session: session.into(),
            limit,
            before,
            reply,
        })
        .await
    }

    /// Pins (or unpins) a checkpoint; returns every pinned checkpoint of the session.
    pub async fn pin(&self, session: &str, at: u64, pinned: bool) -> Result<Vec<u64>, Error> {
        self.ask(|reply| Req::Pin {
            session: session.into(),
            at,
            pinned,
            reply,
        })
        .await
    }

    pub async fn fork(
        &self,
        session: &str,
        at: u64,
        new_session: &str,
        writer: &str,
    ) -> Result<SessionInfo, Error> {
        self.ask(|reply| Req::Fork {
            session: session.into(),
            at,
            new_session: new_session.into(),
            writer: writer.into(),
            reply,
        })
        .await
    }

    /// The code recorded with checkpoint `at` of `session`.
    pub async fn code_at(&self, session: &str, at: u64) -> Result<CodeRef, Error> {
        let found = self.history(session, 1, Some(at.saturating_add(1))).await?;
        match found.into_iter().next() {
            Some(checkpoint) if checkpoint.id == at => checkpoint.code.ok_or_else(|| {
                Error::BadInput(format!(
                    "checkpoint {at} of session `{session}` records no code: it was written \
                     by {} (only an agent's checkpoints record the code it had)",
                    checkpoint.writer
                ))
            }),
            _ => Err(Error::NotFound(format!(
                "session `{session}` has no checkpoint {at} (`grove state history` lists them)"
            ))),
        }
    }

    pub async fn compact(&self, session: &str, keep: u64) -> Result<(u64, u64), Error> {
        self.ask(|reply| Req::Compact {
            session: session.into(),
            keep,
            reply,
        })
        .await
    }

    pub async fn info(&self, name: &str) -> Result<SessionInfo, Error> {
        self.ask(|reply| Req::Info {
            name: name.into(),
            reply,
        })
        .await
    }

    pub async fn list(&self) -> Result<Vec<SessionInfo>, Error> {
        self.ask(|reply| Req::List { reply }).await
    }

    /// Deletes a session with its head, checkpoints, snapshots and pins, keeping an audit
    /// row; answers once both are stored.
    pub async fn remove(
        &self,
        name: &str,
        by: &str,
        reason: &str,
        live_agents: Vec<String>,
    ) -> Result<SessionRemoval, Error> {
        self.ask(|reply| Req::Remove {
            name: name.into(),
            by: by.into(),
            reason: reason.into(),
            live_agents,
            reply,
        })
        .await
    }

    /// Moves a session to a new schema in one checkpoint (source `migrate`).
    pub async fn migrate(
        &self,
        name: &str,
        schema: Schema,
        drop: Vec<String>,
    ) -> Result<grove_proto::methods::SessionMigrateResult, Error> {
        self.ask(|reply| Req::Migrate {
            name: name.into(),
            schema,
            drop,
            reply,
        })
        .await
    }

    /// Moves every session along its lifecycle; `live` names the sessions with a live
    /// agent.
    pub async fn gc(
        &self,
        live: std::collections::HashSet<String>,
        lifecycle: crate::config::SessionLifecycle,
    ) -> Result<gc::GcReport, Error> {
        self.ask(|reply| Req::Gc {
            live,
            lifecycle,
            reply,
        })
        .await
    }

    /// The most recent `limit` session deletions, oldest first.
    pub async fn removals(&self, limit: u32) -> Result<Vec<SessionRemoval>, Error> {
        Ok(self
            .db
            .call(move |conn| store::recent_removals(conn, limit))
            .await?)
    }

    /// Removes a session that holds no checkpoint, e.g. the own session of an agent
    /// whose spawn failed.
    pub async fn drop_unused(&self, name: &str) {
        let _ = self.tx.send(Req::DropUnused { name: name.into() }).await;
    }
}

/// Updates applied in memory and not yet stored, shared with the database thread: a
/// store job takes everything in it when it starts. The state task keeps applying
/// updates and putting them here while the database thread stores (and fsyncs) the
/// group before; the first of them queues the next store job at once, so that the
/// database thread goes from one commit to the next without waiting for this task.
#[derive(Default)]
struct Outbox {
    checkpoints: Vec<CheckpointRow>,
    /// Where each session with checkpoints here stands after them.
    heads: HashMap<String, SessionHead>,
    /// Sequence number of the last checkpoint put here.
    last: u64,
    /// A store job is queued and has not taken its group yet.
    job_queued: bool,
    /// A group could not be stored: nothing more is, until the state task has put the
    /// sessions back as they are stored.
    failed: bool,
}

/// What one store job did.
enum Stored {
    /// Stored everything put in the outbox up to this sequence number.
    Through(u64),
    /// Found nothing to store (or stored nothing, after a failure).
    Nothing,
    Failed(String),
}

type StoreJob = Pin<Box<dyn Future<Output = Stored> + Send>>;

/// An update applied in memory, waiting for its store job.
struct Pending {
    seq: u64,
    reply: Reply<u64>,
    checkpoint: u64,
    event: StateEvent,
}

struct StateService {
    sessions: HashMap<String, Session>,
    /// Most heads in memory (`session_cache`).
    cache: usize,
    limits: StateLimits,
    db: Db,
    events: EventBus,
    outbox: Arc<Mutex<Outbox>>,
    /// Applied, in order, not yet acknowledged.
    pending: VecDeque<Pending>,
    /// Store jobs queued or running, in the order the database thread runs them.
    jobs: VecDeque<StoreJob>,
}

enum Next {
    Request(Req),
    Stored(Stored),
    Stop,
}

/// Every session's row (not its head) and pins.
/// Sessions' rows read per database call at start: the database thread is never held
/// for long by the read of all of them, so that start-up's other calls pass between.
const LOAD_PAGE: usize = 2_000;

async fn load_sessions(db: &Db) -> Result<HashMap<String, Session>, Error> {
    let mut pins = db.call(|conn| store::load_pins(conn)).await?;
    let mut sessions = HashMap::new();
    // Thousands of sessions share a few schemas: each distinct text is parsed once.
    let mut schemas: HashMap<String, Result<Schema, String>> = HashMap::new();
    let mut after = 0;
    loop {
        let page = db
            .call(move |conn| store::load_sessions_page(conn, after, LOAD_PAGE))
            .await?;
        let Some(&(last, ..)) = page.last() else {
            break;
        };
        after = last;
        sessions.reserve(page.len());
        // Heads are read on first use, not here.
        for (_, row, text) in page {
            let parsed = schemas
                .entry(text)
                .or_insert_with_key(|text| parse_schema(text));
            let mut session = Session::from_parsed(row, parsed.clone());
            session.pins = pins.remove(&session.name).unwrap_or_default();
            sessions.insert(session.name.clone(), session);
        }
    }
    Ok(sessions)
}

fn parse_schema(text: &str) -> Result<Schema, String> {
    let json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Schema::from_json(&json).map_err(|e| e.to_string())
}

/// Starts the state task. It reads the sessions' rows before it takes its first
/// request, not before the daemon is ready: start-up does not wait for them (requests
/// sent meanwhile wait in its queue, in order).
pub async fn start(
    db: Db,
    events: EventBus,
    limits: StateLimits,
    lifecycle: crate::config::SessionLifecycle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<StateHandle, Error> {
    let (tx, mut rx) = mpsc::channel::<Req>(4096);
    let db_for_handle = db.clone();
    let mut service = StateService {
        sessions: HashMap::new(),
        cache: lifecycle.cache,
        limits,
        db,
        events,
        outbox: Arc::default(),
        pending: VecDeque::new(),
        jobs: VecDeque::new(),
    };
    tokio::spawn(async move {
        match load_sessions(&service.db).await {
            Ok(sessions) => service.sessions = sessions,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the sessions; shared state is unavailable");
                let why = format!(
                    "the daemon could not read its sessions at start ({e}); nothing was \
                     changed; see the daemon log, then `grove daemon restart`"
                );
                while let Some(req) = rx.recv().await {
                    refuse(req, &why);
                }
                return;
            }
        }
        let stopped = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopped);
        loop {
            let next = tokio::select! {
                biased;
                stored = next_stored(&mut service.jobs) => Next::Stored(stored),
                // Too many waiting: new requests wait for store jobs to catch up.
                req = rx.recv(), if service.pending.len() < MAX_PENDING => {
                    req.map_or(Next::Stop, Next::Request)
                }
                () = &mut stopped => Next::Stop,
            };
            match next {
                Next::Stored(stored) => service.stored(stored).await,
                Next::Request(req) => service.take(req).await,
                Next::Stop => {
                    // What was applied is stored and acknowledged before the task ends.
                    service.drain().await;
                    break;
                }
            }
        }
    });
    Ok(StateHandle {
        tx,
        db: db_for_handle,
    })
}

/// Answers a request with `why` (the sessions could not be read).
fn refuse(req: Req, why: &str) {
    let e = || Error::Internal(why.to_string());
    match req {
        Req::Update { reply, .. } => drop(reply.send(Err(e()))),
        Req::Ensure { reply, .. } => drop(reply.send(Err(e()))),
        Req::Get { reply, .. } => drop(reply.send(Err(e()))),
        Req::History { reply, .. } => drop(reply.send(Err(e()))),
        Req::Pin { reply, .. } => drop(reply.send(Err(e()))),
        Req::Fork { reply, .. } => drop(reply.send(Err(e()))),
        Req::Compact { reply, .. } => drop(reply.send(Err(e()))),
        Req::Info { reply, .. } => drop(reply.send(Err(e()))),
        Req::List { reply } => drop(reply.send(Err(e()))),
        Req::Remove { reply, .. } => drop(reply.send(Err(e()))),
        Req::Migrate { reply, .. } => drop(reply.send(Err(e()))),
        Req::Gc { reply, .. } => drop(reply.send(Err(e()))),
        Req::DropUnused { .. } => {}
    }
}

/// A session as stored, with its head state.
async fn load(db: &Db, row: store::SessionRow) -> Result<Session, Error> {
    let mut session = Session::from_row(row);
    if session.unreadable.is_none() && session.head > 0 {
        let (name, schema, head) = (session.name.clone(), session.schema.clone(), session.head);
        session.current = db
            .call(move |conn| store::state_at(conn, &name, &schema, head))
            .await?;
    }
    Ok(session.measured())
}

/// The result of the oldest store job; never, when there is none.
async fn next_stored(jobs: &mut VecDeque<StoreJob>) -> Stored {
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
fn store_job(conn: &mut rusqlite::Connection, outbox: &Mutex<Outbox>) -> Stored {
    let (checkpoints, heads, through) = {
        let Ok(mut outbox) = outbox.lock() else {
            return Stored::Failed("the state outbox is poisoned".into());
        };
        outbox.job_queued = false;
        if outbox.failed || outbox.checkpoints.is_empty() {
            return Stored::Nothing;
        }
        let heads: Vec<SessionHead> = outbox.heads.drain().map(|(_, head)| head).collect();
        (std::mem::take(&mut outbox.checkpoints), heads, outbox.last)
    };
    match store::commit_group(conn, &checkpoints, &heads) {
        Ok(()) => Stored::Through(through),
        Err(e) => {
            if let Ok(mut outbox) = outbox.lock() {
                outbox.failed = true;
            }
            Stored::Failed(e.to_string())
        }
    }
}

impl StateService {
    /// An update is applied and put in the outbox at once; anything else waits until
    /// every update before it is stored, so that it sees them (and only stored state).
    async fn take(&mut self, req: Req) {
        match req {
            Req::Update {
                session,
                writer,
                writes,
                key,
                code,
                reply,
            } => {
                if let Err(e) = self.use_session(&session).await {
                    let _ = reply.send(Err(e));
                    return;
                }
                self.stage(&session, &writer, &writes, key, code, reply);
                self.keep_checkpoints(&session).await;
            }
            other => {
                self.drain().await;
                self.handle(other).await;
            }
        }
    }

    /// Queues a store job on the database thread unless one is queued already.
    fn queue_store_job(&mut self, outbox: &mut Outbox) {
        if outbox.job_queued {
            return;
        }
        outbox.job_queued = true;
        let shared = self.outbox.clone();
        // Queued now, not when polled: it runs right after the job before it.
        let job = self.db.submit(move |conn| Ok(store_job(conn, &shared)));
        self.jobs.push_back(Box::pin(async move {
            job.await.unwrap_or_else(|e| Stored::Failed(e.to_string()))
        }));
    }

    /// Acknowledges what a store job stored; after a failure, fails everything applied
    /// and not stored, and puts the sessions back as they are stored.
    async fn stored(&mut self, stored: Stored) {
        match stored {
            Stored::Nothing => {}
            Stored::Through(through) => {
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
            }
            Stored::Failed(e) => self.recover(&e).await,
        }
    }

    async fn recover(&mut self, error: &str) {
        tracing::error!(%error, "cannot store state updates; nothing applied");
        let mut touched: Vec<String> = Vec::new();
        for failed in self.pending.drain(..) {
            if !touched.contains(&failed.event.session) {
                touched.push(failed.event.session.clone());
            }
            let _ = failed.reply.send(Err(Error::Internal(format!(
                "could not store the batch ({error}); nothing was applied"
            ))));
        }
        if let Ok(mut outbox) = self.outbox.lock() {
            outbox.checkpoints.clear();
            outbox.heads.clear();
        }
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
    async fn reload(&mut self, name: &str) -> Result<(), Error> {
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
    async fn drain(&mut self) {
        while let Some(job) = self.jobs.front_mut() {
            let stored = job.as_mut().await;
            self.jobs.pop_front();
            self.stored(stored).await;
        }
    }

    fn session(&self, name: &str) -> Result<&Session, Error> {
        let session = self.sessions.get(name).ok_or_else(|| {
            Error::NotFound(format!(
                "no session `{name}`; sessions start with `grove spawn --session {name}` or \
                 the session.create method (`grove session list` shows them)"
            ))
        })?;
        session.check_readable()?;
        Ok(session)
    }

    /// Applies one batch in memory and puts it in the outbox for the next store job.
    fn stage(
        &mut self,
        name: &str,
        writer: &str,
        writes: &[Write],
        key: Option<String>,
        code: Option<CodeRef>,
        reply: Reply<u64>,
    ) {
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
                let _ = reply.send(Err(Error::Internal(format!(
                    "cannot encode the batch: {e}"
                ))));
                return;
            }
        };
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
            let _ = reply.send(Err(Error::Internal("the state outbox is poisoned".into())));
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
        });
        self.queue_store_job(&mut outbox);
    }

    async fn handle(&mut self, req: Req) {
        match req {
            Req::Update { .. } => {}
            Req::Ensure {
                name,
                schema,
                explicit,
                reserve,
                reply,
            } => {
                let _ = reply.send(self.ensure(&name, schema, explicit, reserve).await);
            }
            Req::Get { session, at, reply } => match self.use_session(&session).await {
                Ok(()) => self.get(&session, at, reply),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Req::History {
                session,
                limit,
                before,
                reply,
            } => {
                let _ = self.use_session(&session).await;
                self.history(&session, limit, before, reply);
            }
            Req::Migrate {
                name,
                schema,
                drop,
                reply,
            } => {
                let _ = reply.send(self.migrate(&name, schema, drop).await);
            }
            Req::Gc {
                live,
                lifecycle,
                reply,
            } => {
                let _ = reply.send(self.gc(&live, lifecycle).await);
            }
            Req::Pin {
                session,
                at,
                pinned,
                reply,
            } => {
                let _ = reply.send(self.pin(&session, at, pinned).await);
            }
            Req::Fork {
                session,
                at,
                new_session,
                writer,
                reply,
            } => {
                let forked = match self.use_session(&session).await {
                    Ok(()) => self.fork(&session, at, &new_session, &writer).await,
                    Err(e) => Err(e),
                };
                if forked.is_ok() {
                    self.keep_cache(&new_session);
                }
                let _ = reply.send(forked);
            }
            Req::Compact {
                session,
                keep,
                reply,
            } => {
                let _ = reply.send(self.compact(&session, keep).await);
            }
            Req::Info { name, reply } => {
                let _ = reply.send(self.session(&name).map(Session::info));
            }
            Req::Remove {
                name,
                by,
                reason,
                live_agents,
                reply,
            } => {
                let _ = reply.send(self.remove(&name, by, reason, live_agents).await);
            }
            Req::DropUnused { name } => {
                if self.sessions.get(&name).is_some_and(|s| s.head == 0) {
                    self.sessions.remove(&name);
                    let owned = name.clone();
                    if let Err(e) = self
                        .db
                        .call(move |conn| store::delete_session(conn, &owned))
                        .await
                    {
                        tracing::error!(session = %name, error = %e, "cannot delete an unused session");
                    }
                }
            }
            Req::List { reply } => {
                let mut all: Vec<SessionInfo> = self
                    .sessions
                    .values()
                    .filter(|s| !s.reserved)
                    .map(Session::info)
                    .collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                let _ = reply.send(Ok(all));
            }
        }
    }

    async fn ensure(
        &mut self,
        name: &str,
        schema: Option<Schema>,
        explicit: bool,
        reserve: bool,
    ) -> Result<(), Error> {
        if let Some(existing) = self.sessions.get_mut(name) {
            let differs = schema
                .as_ref()
                .is_some_and(|s| s.to_json() != existing.schema.to_json());
            if explicit && differs {
                return Err(Error::BadInput(format!(
                    "session `{name}` already exists with another schema; use a new session \
                     name, or spawn without --schema to join it"
                )));
            }
            if existing.reserved && !reserve {
                // Named on purpose (a spawn or session.create): a session from now on.
                existing.reserved = false;
                let row = existing.row();
                self.db
                    .call(move |conn| store::upsert_session(conn, &row))
                    .await?;
            }
            return Ok(());
        }
        validate_session_name(name)?;
        let schema = schema.unwrap_or(Schema {
            version: grove_state::SCHEMA_VERSION,
            channels: Default::default(),
        });
        let mut session = Session::new(name, schema, now_ms());
        session.reserved = reserve;
        let row = session.row();
        self.db
            .call(move |conn| store::upsert_session(conn, &row))
            .await?;
        self.sessions.insert(name.to_string(), session);
        self.keep_cache(name);
        Ok(())
    }

    /// The head is in memory; older checkpoints are read on the database thread
    /// without holding up this task.
    fn get(&self, name: &str, at: Option<u64>, reply: Reply<(u64, State)>) {
        let session = match self.session(name) {
            Ok(session) => session,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let at = at.unwrap_or(session.head);
        if let Err(e) = session.check_checkpoint(at) {
            let _ = reply.send(Err(e));
            return;
        }
        if at == session.head {
            let _ = reply.send(Ok((at, session.current.clone())));
            return;
        }
        let (db, name, schema) = (self.db.clone(), name.to_string(), session.schema.clone());
        tokio::spawn(async move {
            let state = db
                .call(move |conn| store::state_at(conn, &name, &schema, at))
                .await
                .map_err(Error::from);
            let _ = reply.send(state.map(|s| (at, s)));
        });
    }

    fn history(
        &self,
        name: &str,
        limit: u32,
        before: Option<u64>,
        reply: Reply<Vec<CheckpointInfo>>,
    ) {
        if let Err(e) = self.session(name) {
            let _ = reply.send(Err(e));
            return;
        }
        let (db, name) = (self.db.clone(), name.to_string());
        tokio::spawn(async move {
            let history = db
                .call(move |conn| store::history(conn, &name, limit, before))
                .await
                .map_err(Error::from);
            let _ = reply.send(history);
        });
    }

    async fn fork(
        &mut self,
        name: &str,
        at: u64,
        new_name: &str,
        writer: &str,
    ) -> Result<SessionInfo, Error> {
        let source = self.session(name)?;
        source.check_checkpoint(at)?;
        validate_session_name(new_name)?;
        if self.sessions.contains_key(new_name) {
            return Err(Error::BadInput(format!(
                "session `{new_name}` already exists; fork into a new name"
            )));
        }
        let (schema, head, current) = (source.schema.clone(), source.head, source.current.clone());
        let state = if at == head {
            current
        } else {
            let (n, s) = (name.to_string(), schema.clone());
            self.db
                .call(move |conn| store::state_at(conn, &n, &s, at))
                .await?
        };
        let n = name.to_string();
        // The fork starts on the code its checkpoint recorded.
        let code = self
            .db
            .call(move |conn| store::checkpoint_code(conn, &n, at))
            .await?;
        let at_ms = now_ms();
        let mut fork = Session::new(new_name, schema, at_ms);
        fork.current = state.clone();
        let mut fork = fork.measured();
        fork.head = 1;
        fork.oldest = 1;
        fork.last_at_ms = Some(at_ms);
        fork.forked_from = Some(name.to_string());
        fork.forked_at = Some(at);
        let info = CheckpointInfo {
            id: 1,
            parent: Some(at),
            parent_session: Some(name.to_string()),
            at_ms,
            writer: writer.to_string(),
            source: "fork".into(),
            channels: Vec::new(),
            schema_version: fork.schema_version,
            code,
        };
        let first = CheckpointRow::new(new_name, info, &[], Some(&state))
            .map_err(|e| Error::Internal(format!("cannot encode the state: {e}")))?;
        let row = fork.row();
        self.db
            .call(move |conn| store::commit_fork(conn, &first, &row))
            .await?;
        let info = fork.info();
        self.sessions.insert(new_name.to_string(), fork);
        Ok(info)
    }

    async fn compact(&mut self, name: &str, keep: u64) -> Result<(u64, u64), Error> {
        if keep == 0 {
            return Err(Error::BadInput("--keep must be at least 1".into()));
        }
        let session = self.session(name)?;
        let oldest = session.head.saturating_sub(keep) + 1;
        if session.head == 0 || oldest <= session.oldest.max(1) {
            return Ok((0, session.oldest));
        }
        let mut row = session.row();
        row.oldest = oldest;
        let schema = session.schema.clone();
        let pins = session.pins.clone();
        let (dropped, code) = self
            .db
            .call(move |conn| store::compact(conn, &row, &schema, &pins))
            .await?;
        code::drop_refs_later(code);
        if let Some(session) = self.sessions.get_mut(name) {
            session.oldest = oldest;
        }
        Ok((dropped, oldest))
    }
}

/// Checkpoints beyond `checkpoint_keep` are compacted once this many more accumulate,
/// not after every write: each compaction waits for the stored head.
const COMPACT_SLACK: u64 = 64;

/// A batch over `state_max_write` is refused before it is applied.
fn check_write_size(writes: &[Write], limits: StateLimits) -> Result<(), Error> {
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
fn check_session_size(
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

impl StateService {
    /// Compacts a session that holds `COMPACT_SLACK` checkpoints more than
    /// `checkpoint_keep`, down to `checkpoint_keep` (pinned ones stay).
    async fn keep_checkpoints(&mut self, name: &str) {
        let keep = self.limits.checkpoint_keep;
        let over = self
            .sessions
            .get(name)
            .is_some_and(|s| s.head.saturating_sub(s.oldest.max(1)) + 1 > keep + COMPACT_SLACK);
        if !over {
            return;
        }
        // Compaction works on what is stored.
        self.drain().await;
        if let Err(e) = self.compact(name, keep).await {
            tracing::error!(session = %name, error = %e, "cannot compact a session");
        }
    }

    async fn remove(
        &mut self,
        name: &str,
        by: String,
        reason: String,
        live_agents: Vec<String>,
    ) -> Result<SessionRemoval, Error> {
        // An unreadable session may be deleted too: nothing of it is read.
        let Some(session) = self.sessions.get(name) else {
            return Err(Error::NotFound(format!(
                "no session `{name}` (`grove session list` shows them)"
            )));
        };
        if session.reserved {
            return self.remove_reserved(name, by, reason).await;
        }
        let pinned_older = session.pins.iter().filter(|&&p| p < session.oldest).count();
        let checkpoints = session.info().checkpoints + pinned_older as u64;
        let owned = name.to_string();
        let removal = self
            .db
            .call(move |conn| {
                let removal = SessionRemoval {
                    at_ms: now_ms(),
                    bytes: store::stored_bytes(conn, &owned)?,
                    session: owned,
                    by,
                    reason,
                    checkpoints,
                    live_agents,
                };
                let code = store::remove_session(conn, &removal)?;
                Ok((removal, code))
            })
            .await?;
        self.sessions.remove(name);
        let (removal, code) = removal;
        code::drop_refs_later(code);
        Ok(removal)
    }

    /// A session never written held nothing: it goes without an audit row.
    async fn remove_reserved(
        &mut self,
        name: &str,
        by: String,
        reason: String,
    ) -> Result<SessionRemoval, Error> {
        let owned = name.to_string();
        self.db
            .call(move |conn| store::delete_session(conn, &owned))
            .await?;
        self.sessions.remove(name);
        Ok(SessionRemoval {
            at_ms: now_ms(),
            bytes: 0,
            session: name.to_string(),
            by,
            reason,
            checkpoints: 0,
            live_agents: Vec::new(),
        })
    }

    async fn pin(&mut self, name: &str, at: u64, pinned: bool) -> Result<Vec<u64>, Error> {
        let session = self.session(name)?;
        if pinned {
            if at == 0 {
                return Err(Error::BadInput(
                    "checkpoint 0 is the initial state and is always readable; pin a \
                     checkpoint from 1 on"
                        .into(),
                ));
            }
            session.check_checkpoint(at)?;
        } else if !session.pins.contains(&at) {
            return Err(Error::NotFound(format!(
                "checkpoint {at} of session `{name}` is not pinned (pinned: {})",
                list_ids(&session.pins)
            )));
        }
        let (owned, oldest) = (name.to_string(), session.oldest);
        let code = self
            .db
            .call(move |conn| store::set_pin(conn, &owned, at, pinned, oldest))
            .await?;
        code::drop_refs_later(code.unwrap_or_default());
        let Some(session) = self.sessions.get_mut(name) else {
            return Ok(Vec::new());
        };
        if pinned {
            session.pins.insert(at);
        } else {
            session.pins.remove(&at);
        }
        Ok(session.pins.iter().copied().collect())
    }
}

fn list_ids(ids: &std::collections::BTreeSet<u64>) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn batch_error(e: BatchError) -> Error {
    match e {
        BatchError::Conflict { .. } => Error::Conflict(e.to_string()),
        other => Error::BadInput(other.to_string()),
    }
}

pub fn validate_session_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "session name `{name}` is not valid: use 1 to 64 letters, digits, `-`, `_` or `.`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add_one() -> Vec<Write> {
        vec![Write {
            channel: "n".into(),
            value: json!(1),
            base: None,
        }]
    }

    async fn started() -> (tempfile::TempDir, Db, StateHandle, watch::Sender<bool>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(&dir.path().join("grove.db")).expect("db");
        let (stop, stopped) = watch::channel(false);
        let state = start(
            db.clone(),
            EventBus::default(),
            StateLimits::default(),
            crate::config::SessionLifecycle::default(),
            stopped,
        )
        .await
        .expect("start");
        let schema = Schema::from_json(&json!({
            "version": 1,
            "channels": { "n": { "reducer": "add" } }
        }))
        .expect("schema");
        state.ensure("s", Some(schema), true).await.expect("ensure");
        (dir, db, state, stop)
    }

    /// `updates` updates sent together; their answers.
    async fn together(state: &StateHandle, updates: usize) -> Vec<Result<u64, Error>> {
        let tasks: Vec<_> = (0..updates)
            .map(|_| {
                let state = state.clone();
                tokio::spawn(async move { state.update("s", "user", add_one(), None, None).await })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.expect("task"));
        }
        answers
    }

    async fn stored_checkpoints(db: &Db) -> u64 {
        db.call(|conn| {
            conn.query_row(
                "SELECT count(*) FROM checkpoints WHERE session = 's'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })
        .await
        .expect("count") as u64
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn updates_sent_together_get_every_checkpoint_once() {
        let (_dir, db, state, _stop) = started().await;
        let mut ids: Vec<u64> = together(&state, 200)
            .await
            .into_iter()
            .map(|answer| answer.expect("stored"))
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=200).collect::<Vec<u64>>());
        let (head, current) = state.get("s", None).await.expect("get");
        assert_eq!((head, &current["n"]), (200, &json!(200)));
        assert_eq!(
            state.get("s", Some(77)).await.expect("get").1["n"],
            json!(77)
        );
        assert_eq!(stored_checkpoints(&db).await, 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_commit_fails_every_update_applied_after_it_and_nothing_stays_applied() {
        let (_dir, db, state, _stop) = started().await;
        assert_eq!(
            state
                .update("s", "user", add_one(), None, None)
                .await
                .expect("first"),
            1
        );
        // From here every write fails, while more updates keep coming.
        db.call(|conn| conn.pragma_update(None, "query_only", true))
            .await
            .expect("read only");
        let answers = together(&state, 50).await;
        assert!(answers.iter().all(Result::is_err), "{answers:?}");
        db.call(|conn| conn.pragma_update(None, "query_only", false))
            .await
            .expect("writable");
        assert_eq!(state.get("s", None).await.expect("get").1["n"], json!(1));
        assert_eq!(
            state
                .update("s", "user", add_one(), None, None)
                .await
                .expect("after"),
            2
        );
        let (head, current) = state.get("s", None).await.expect("get");
        assert_eq!((head, &current["n"]), (2, &json!(2)));
        assert_eq!(stored_checkpoints(&db).await, 2);
    }
}

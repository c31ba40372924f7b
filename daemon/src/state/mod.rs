//! Sessions and their shared state. One task owns every session's head state; updates
//! that arrive together are applied one by one in arrival order and stored in one
//! transaction (group commit), then acknowledged: throughput without giving up "an
//! acknowledged batch is durable".

mod session;
mod store;

use crate::db::Db;
use crate::error::Error;
use crate::events::EventBus;
use grove_agent_shim::now_ms;
use grove_proto::state::{CheckpointInfo, SessionInfo};
use grove_state::{apply_batch, channels_written, BatchError, Schema, State, Write};
use serde::Serialize;
use session::Session;
use std::collections::HashMap;
use store::{CheckpointRow, SNAPSHOT_EVERY};
use tokio::sync::{mpsc, oneshot, watch};

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// Most updates stored in one transaction.
const MAX_GROUP: usize = 512;

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
        reply: Reply<u64>,
    },
    Ensure {
        name: String,
        schema: Option<Schema>,
        explicit: bool,
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
        reply: Reply<Vec<CheckpointInfo>>,
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
    /// Forget a session that never got a checkpoint (its only agent never started).
    DropUnused {
        name: String,
    },
}

#[derive(Clone)]
pub struct StateHandle {
    tx: mpsc::Sender<Req>,
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

    /// Applies one batch; returns its checkpoint once it is durable.
    pub async fn update(
        &self,
        session: &str,
        writer: &str,
        writes: Vec<Write>,
    ) -> Result<u64, Error> {
        self.ask(|reply| Req::Update {
            session: session.into(),
            writer: writer.into(),
            writes,
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

    pub async fn history(&self, session: &str, limit: u32) -> Result<Vec<CheckpointInfo>, Error> {
        self.ask(|reply| Req::History {
            session: session.into(),
            limit,
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

    /// Removes a session that holds no checkpoint, e.g. the own session of an agent
    /// whose spawn failed.
    pub async fn drop_unused(&self, name: &str) {
        let _ = self.tx.send(Req::DropUnused { name: name.into() }).await;
    }
}

/// Updates applied in memory but not yet stored.
#[derive(Default)]
struct Group {
    checkpoints: Vec<CheckpointRow>,
    /// Each touched session as it was before the group, to undo a failed commit.
    undo: HashMap<String, Session>,
    acks: Vec<(Reply<u64>, u64)>,
    events: Vec<StateEvent>,
}

struct StateService {
    sessions: HashMap<String, Session>,
    db: Db,
    events: EventBus,
}

/// Loads every session and starts the state task.
pub async fn start(
    db: Db,
    events: EventBus,
    mut shutdown: watch::Receiver<bool>,
) -> Result<StateHandle, Error> {
    let rows = db.call(|conn| store::load_sessions(conn)).await?;
    let mut sessions = HashMap::new();
    for row in rows {
        let mut session = Session::from_row(row);
        if session.unreadable.is_none() && session.head > 0 {
            let (name, schema, head) = (session.name.clone(), session.schema.clone(), session.head);
            session.current = db
                .call(move |conn| store::state_at(conn, &name, &schema, head))
                .await?;
        }
        sessions.insert(session.name.clone(), session);
    }
    let (tx, mut rx) = mpsc::channel::<Req>(4096);
    let mut service = StateService {
        sessions,
        db,
        events,
    };
    tokio::spawn(async move {
        let stopped = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopped);
        loop {
            let first = tokio::select! {
                req = rx.recv() => match req { Some(req) => req, None => break },
                () = &mut stopped => break,
            };
            let mut pending = vec![first];
            while pending.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(req) => pending.push(req),
                    Err(_) => break,
                }
            }
            service.serve(pending).await;
        }
    });
    Ok(StateHandle { tx })
}

impl StateService {
    async fn serve(&mut self, pending: Vec<Req>) {
        let mut group = Group::default();
        for req in pending {
            match req {
                Req::Update {
                    session,
                    writer,
                    writes,
                    reply,
                } => self.stage(&mut group, &session, &writer, &writes, reply),
                other => {
                    // Everything else sees the updates before it, stored.
                    self.flush(std::mem::take(&mut group)).await;
                    self.handle(other).await;
                }
            }
        }
        self.flush(group).await;
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

    /// Applies one batch in memory and stages it for the next commit.
    fn stage(
        &mut self,
        group: &mut Group,
        name: &str,
        writer: &str,
        writes: &[Write],
        reply: Reply<u64>,
    ) {
        if let Err(e) = self.session(name) {
            let _ = reply.send(Err(e));
            return;
        }
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
        group
            .undo
            .entry(name.to_string())
            .or_insert_with(|| session.clone());
        let id = session.head + 1;
        let at_ms = now_ms();
        let channels = channels_written(writes);
        for channel in &channels {
            let change =
                grove_state::LastChange::after(session.last_changes.get(channel), id, writer);
            session.last_changes.insert(channel.clone(), change);
        }
        session.current = state;
        session.head = id;
        session.oldest = session.oldest.max(1);
        session.last_at_ms = Some(at_ms);
        group.checkpoints.push(CheckpointRow {
            session: name.to_string(),
            info: CheckpointInfo {
                id,
                parent: (id > 1).then_some(id - 1),
                parent_session: None,
                at_ms,
                writer: writer.to_string(),
                source: "update".into(),
                channels: channels.clone(),
                schema_version: session.schema_version,
            },
            writes: writes.to_vec(),
            snapshot: (id % SNAPSHOT_EVERY == 0).then(|| session.current.clone()),
        });
        group.acks.push((reply, id));
        group.events.push(StateEvent {
            session: name.to_string(),
            checkpoint: id,
            writer: writer.to_string(),
            channels,
            at_ms,
        });
    }

    /// Stores a group in one transaction; acknowledges it, or undoes it in memory.
    async fn flush(&mut self, group: Group) {
        if group.acks.is_empty() {
            return;
        }
        let rows: Vec<store::SessionRow> = group
            .undo
            .keys()
            .filter_map(|name| self.sessions.get(name).map(Session::row))
            .collect();
        let checkpoints = group.checkpoints;
        let stored = self
            .db
            .call(move |conn| store::commit_group(conn, &checkpoints, &rows))
            .await;
        match stored {
            Ok(()) => {
                for (reply, id) in group.acks {
                    let _ = reply.send(Ok(id));
                }
                for event in group.events {
                    self.events.publish(
                        "state.updated",
                        &event,
                        Some(&event.session),
                        Some(&event.writer),
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot store state updates; nothing applied");
                self.sessions.extend(group.undo);
                for (reply, _) in group.acks {
                    let _ = reply.send(Err(Error::Internal(format!(
                        "could not store the batch ({e}); nothing was applied"
                    ))));
                }
            }
        }
    }

    async fn handle(&mut self, req: Req) {
        match req {
            Req::Update { .. } => {}
            Req::Ensure {
                name,
                schema,
                explicit,
                reply,
            } => {
                let _ = reply.send(self.ensure(&name, schema, explicit).await);
            }
            Req::Get { session, at, reply } => self.get(&session, at, reply),
            Req::History {
                session,
                limit,
                reply,
            } => self.history(&session, limit, reply),
            Req::Fork {
                session,
                at,
                new_session,
                writer,
                reply,
            } => {
                let _ = reply.send(self.fork(&session, at, &new_session, &writer).await);
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
                let mut all: Vec<SessionInfo> = self.sessions.values().map(Session::info).collect();
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
    ) -> Result<(), Error> {
        if let Some(existing) = self.sessions.get(name) {
            let differs = schema
                .as_ref()
                .is_some_and(|s| s.to_json() != existing.schema.to_json());
            if explicit && differs {
                return Err(Error::BadInput(format!(
                    "session `{name}` already exists with another schema; use a new session \
                     name, or spawn without --schema to join it"
                )));
            }
            return Ok(());
        }
        validate_session_name(name)?;
        let schema = schema.unwrap_or(Schema {
            version: grove_state::SCHEMA_VERSION,
            channels: Default::default(),
        });
        let session = Session::new(name, schema, now_ms());
        let row = session.row();
        self.db
            .call(move |conn| store::upsert_session(conn, &row))
            .await?;
        self.sessions.insert(name.to_string(), session);
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

    fn history(&self, name: &str, limit: u32, reply: Reply<Vec<CheckpointInfo>>) {
        if let Err(e) = self.session(name) {
            let _ = reply.send(Err(e));
            return;
        }
        let (db, name) = (self.db.clone(), name.to_string());
        tokio::spawn(async move {
            let history = db
                .call(move |conn| store::history(conn, &name, limit))
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
        let at_ms = now_ms();
        let mut fork = Session::new(new_name, schema, at_ms);
        fork.current = state.clone();
        fork.head = 1;
        fork.oldest = 1;
        fork.last_at_ms = Some(at_ms);
        fork.forked_from = Some(name.to_string());
        fork.forked_at = Some(at);
        let first = CheckpointRow {
            session: new_name.to_string(),
            info: CheckpointInfo {
                id: 1,
                parent: Some(at),
                parent_session: Some(name.to_string()),
                at_ms,
                writer: writer.to_string(),
                source: "fork".into(),
                channels: Vec::new(),
                schema_version: fork.schema_version,
            },
            writes: Vec::new(),
            snapshot: Some(state),
        };
        let row = fork.row();
        self.db
            .call(move |conn| store::commit_group(conn, &[first], &[row]))
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
        let dropped = self
            .db
            .call(move |conn| store::compact(conn, &row, &schema))
            .await?;
        if let Some(session) = self.sessions.get_mut(name) {
            session.oldest = oldest;
        }
        Ok((dropped, oldest))
    }
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

//! Every request but an update: each waits until the updates before it are stored, so
//! that it sees them (and only stored state).

use super::commit::COMPACT_SLACK;
use super::*;

impl StateService {
    /// An update is applied and put in the outbox at once; anything else waits until
    /// every update before it is stored, so that it sees them (and only stored state).
    pub(super) async fn take(&mut self, req: Req) {
        let woken = match self.wake_for(&req).await {
            Ok(woken) => woken,
            Err(e) => return super::fail(req, e),
        };
        self.take_resident(req).await;
        for name in woken {
            self.doze(&name);
        }
    }

    /// [`Self::take`] once the sessions `req` names are resident.
    async fn take_resident(&mut self, req: Req) {
        match req {
            Req::Update {
                session,
                writer,
                tree,
                writes,
                key,
                code,
                reply,
            } => {
                if let Err(e) = self.use_session(&session).await {
                    let _ = reply.send(Err(e));
                    return;
                }
                let by = Writer {
                    id: &writer,
                    tree: tree.as_deref(),
                };
                self.stage(&session, by, &writes, key, code, reply);
                self.keep_checkpoints(&session);
            }
            other => {
                self.drain().await;
                self.handle(other).await;
            }
        }
    }

    pub(super) fn session(&self, name: &str) -> Result<&Session, Error> {
        let session = self.sessions.get(name).ok_or_else(|| {
            Error::NotFound(format!(
                "no session `{name}`; sessions start with `grove spawn --session {name}` or \
                 the session.create method (`grove session list` shows them)"
            ))
        })?;
        session.check_readable()?;
        Ok(session)
    }

    pub(super) async fn handle(&mut self, req: Req) {
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
            Req::Get {
                session,
                at,
                migrate,
                reply,
            } => match self.use_session(&session).await {
                Ok(()) => self.get(&session, at, migrate, reply),
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
                rename,
                reply,
            } => {
                let _ = reply.send(self.migrate(&name, schema, drop, rename).await);
            }
            Req::Gc {
                agents,
                lifecycle,
                reply,
            } => {
                let _ = reply.send(self.gc(&agents, lifecycle).await);
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
                tree,
                migrate,
                reply,
            } => {
                let by = Writer {
                    id: &writer,
                    tree: tree.as_deref(),
                };
                let forked = match self.use_session(&session).await {
                    Ok(()) => self.fork(&session, at, &new_session, by, migrate).await,
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
                purged,
                reply,
            } => {
                let removing = self.remove(&name, by, reason, live_agents, purged);
                let _ = reply.send(removing.await);
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
            Req::List { reply } => self.list(reply),
        }
    }

    pub(super) async fn ensure(
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
        let schema = schema.unwrap_or(Schema::empty());
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
    pub(super) fn get(
        &self,
        name: &str,
        at: Option<u64>,
        migrate: bool,
        reply: Reply<(u64, State)>,
    ) {
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
            let state = match migrate {
                false => db
                    .call(move |conn| store::state_at(conn, &name, &schema, at))
                    .await
                    .map_err(Error::from),
                true => super::eras::migrated_state_at(&db, name, schema, at).await,
            };
            let _ = reply.send(state.map(|s| (at, s)));
        });
    }

    pub(super) fn history(
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

    pub(super) async fn fork(
        &mut self,
        name: &str,
        at: u64,
        new_name: &str,
        by: Writer<'_>,
        migrate: bool,
    ) -> Result<SessionInfo, Error> {
        let writer = by.id;
        let source = self.session(name)?;
        source.check_checkpoint(at)?;
        validate_session_name(new_name)?;
        if self.sessions.contains_key(new_name) || self.dormant.contains_key(new_name) {
            return Err(Error::BadInput(format!(
                "session `{new_name}` already exists; fork into a new name"
            )));
        }
        let (current_schema, head, current) =
            (source.schema.clone(), source.head, source.current.clone());
        let (n, s) = (name.to_string(), current_schema.clone());
        // Read in one go: the state at `at` and the schemas of the eras since.
        let (kept, state) = self
            .db
            .call(move |conn| {
                let kept = super::eras::kept_after(conn, &n, at)?;
                let state = if at == head {
                    current
                } else {
                    store::state_at(conn, &n, &s, at)?
                };
                Ok((kept, state))
            })
            .await?;
        let (schema, state) =
            super::eras::fork_point(name, kept, &current_schema, state, migrate).await?;
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
        let first = CheckpointRow::new(new_name, info, &[], Some(&state)).map_err(|source| {
            Error::Encode {
                what: "the state",
                source,
            }
        })?;
        let row = fork.row();
        let charged = by.tree.map(|tree| (tree.to_string(), first.bytes()));
        if let Some((tree, bytes)) = &charged {
            self.budget.charge(tree, writer, *bytes)?;
        }
        let stored = self
            .db
            .call(move |conn| store::commit_fork(conn, &first, &row))
            .await;
        if let (Err(_), Some((tree, bytes))) = (&stored, &charged) {
            self.budget.refund(tree, *bytes);
        }
        stored?;
        let info = fork.info();
        self.sessions.insert(new_name.to_string(), fork);
        Ok(info)
    }

    pub(super) async fn compact(&mut self, name: &str, keep: u64) -> Result<(u64, u64), Error> {
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
        let ((dropped, code), freed) = self
            .db
            .call(move |conn| {
                let name = row.name.clone();
                counted(conn, &name, |conn| {
                    store::compact(conn, &row, &schema, &pins)
                })
            })
            .await?;
        self.budget.stored(&freed);
        code::drop_refs_later(code);
        if let Some(session) = self.sessions.get_mut(name) {
            session.oldest = oldest;
        }
        Ok((dropped, oldest))
    }
}

impl StateService {
    /// Compacts a session that holds `COMPACT_SLACK` checkpoints more than
    /// `checkpoint_keep`, down to `checkpoint_keep` (pinned ones stay), with the next
    /// group of updates: in its transaction, after its checkpoints, so that nothing
    /// waits for it.
    pub(super) fn keep_checkpoints(&mut self, name: &str) {
        let keep = self.limits.checkpoint_keep;
        let Some(session) = self.sessions.get_mut(name) else {
            return;
        };
        if session.head.saturating_sub(session.oldest.max(1)) < keep + COMPACT_SLACK {
            return;
        }
        let oldest = session.head.saturating_sub(keep) + 1;
        session.oldest = oldest;
        let compaction = Compaction {
            session: name.to_string(),
            oldest,
            schema: session.schema.clone(),
            pins: session.pins.clone(),
        };
        let outbox = self.outbox.clone();
        let Ok(mut outbox) = outbox.lock() else {
            return;
        };
        outbox.compact(compaction);
        self.queue_store_job(&mut outbox);
    }

    pub(super) async fn remove(
        &mut self,
        name: &str,
        by: String,
        reason: String,
        live_agents: Vec<String>,
        purged: Option<grove_proto::state::Purged>,
    ) -> Result<SessionRemoval, Error> {
        // An unreadable session may be deleted too: nothing of it is read.
        let Some(session) = self.sessions.get(name) else {
            return Err(Error::NotFound(format!(
                "no session `{name}` (`grove session list` shows them)"
            )));
        };
        // A purge keeps its audit row even when nothing was written to the session.
        if session.reserved && purged.is_none() {
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
                    purged,
                };
                let name = removal.session.clone();
                let (code, freed) =
                    counted(conn, &name, |conn| store::remove_session(conn, &removal))?;
                Ok((removal, code, freed))
            })
            .await?;
        self.sessions.remove(name);
        let (removal, code, freed) = removal;
        self.budget.stored(&freed);
        code::drop_refs_later(code);
        Ok(removal)
    }

    /// A session never written held nothing: it goes without an audit row.
    pub(super) async fn remove_reserved(
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
            purged: None,
        })
    }

    pub(super) async fn pin(
        &mut self,
        name: &str,
        at: u64,
        pinned: bool,
    ) -> Result<Vec<u64>, Error> {
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
        let (code, freed) = self
            .db
            .call(move |conn| {
                let name = owned.clone();
                counted(conn, &name, |conn| {
                    store::set_pin(conn, &owned, at, pinned, oldest)
                })
            })
            .await?;
        self.budget.stored(&freed);
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

/// Runs `change` on session `name`, with what it changed in each writer's stored
/// checkpoints (`tree_max_db`). On the database thread, so nothing writes between.
fn counted<T>(
    conn: &mut rusqlite::Connection,
    name: &str,
    change: impl FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<(T, budget::WriterBytes)> {
    let before = store::session_writer_bytes(conn, name)?;
    let done = change(conn)?;
    let after = store::session_writer_bytes(conn, name)?;
    Ok((done, budget::difference(&before, &after)))
}

pub(super) fn list_ids(ids: &std::collections::BTreeSet<u64>) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn batch_error(e: BatchError) -> Error {
    match e {
        BatchError::Conflict { .. } | BatchError::KeyConflict { .. } => {
            Error::Conflict(e.to_string())
        }
        other => Error::BadInput(other.to_string()),
    }
}

/// Who writes an update: an agent id or `user`, and an agent's tree (its root).
pub(super) struct Writer<'a> {
    pub(super) id: &'a str,
    pub(super) tree: Option<&'a str>,
}

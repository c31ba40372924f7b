//! The handle every other part of the daemon holds: one request per call, answered by
//! the state task in arrival order.

use super::*;

pub(super) enum Req {
    Update {
        session: String,
        writer: String,
        /// The writer's tree (its root), when an agent writes: counted (`tree_max_db`).
        tree: Option<String>,
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
        migrate: bool,
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
        /// The writer's tree (its root), when an agent forks: counted (`tree_max_db`).
        tree: Option<String>,
        /// Carry the state through the migrations since `at` to the newest schema.
        migrate: bool,
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
        purged: Option<grove_proto::state::Purged>,
        reply: Reply<SessionRemoval>,
    },
    Migrate {
        name: String,
        schema: Schema,
        drop: Vec<String>,
        rename: std::collections::BTreeMap<String, String>,
        reply: Reply<grove_proto::methods::SessionMigrateResult>,
    },
    Gc {
        agents: gc::AgentActivity,
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
    pub(super) tx: mpsc::Sender<Req>,
    pub(super) db: Db,
    pub(super) budget: Arc<super::budget::TreeDb>,
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
        self.update_in_tree(session, writer, None, writes, key, code)
            .await
    }

    /// [`update`](Self::update) by an agent of the tree of `tree` (its root), which
    /// counts against the tree's share of the database (`tree_max_db`).
    pub async fn update_in_tree(
        &self,
        session: &str,
        writer: &str,
        tree: Option<&str>,
        writes: Vec<Write>,
        key: Option<String>,
        code: Option<CodeRef>,
    ) -> Result<u64, Error> {
        self.ask(|reply| Req::Update {
            session: session.into(),
            writer: writer.into(),
            tree: tree.map(String::from),
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

    #[cfg(test)]
    pub async fn get(&self, session: &str, at: Option<u64>) -> Result<(u64, State), Error> {
        self.get_migrated(session, at, false).await
    }

    /// [`StateHandle::get`], with `migrate`: an older era's state carried through every
    /// migration since, in the newest schema.
    pub async fn get_migrated(
        &self,
        session: &str,
        at: Option<u64>,
        migrate: bool,
    ) -> Result<(u64, State), Error> {
        self.ask(|reply| Req::Get {
            session: session.into(),
            at,
            migrate,
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

    /// Forks `session` at `at` into `new_session`; an agent's fork (`tree`: its root)
    /// counts against its tree's share of the database.
    pub async fn fork(
        &self,
        session: &str,
        at: u64,
        new_session: &str,
        (writer, tree): (&str, Option<&str>),
        migrate: bool,
    ) -> Result<SessionInfo, Error> {
        self.ask(|reply| Req::Fork {
            session: session.into(),
            at,
            new_session: new_session.into(),
            writer: writer.into(),
            tree: tree.map(String::from),
            migrate,
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
            purged: None,
            reply,
        })
        .await
    }

    /// Deletes a session as [`remove`](Self::remove) does, its audit row saying what
    /// else the purge deleted before.
    pub async fn remove_purged(
        &self,
        name: &str,
        reason: &str,
        purged: grove_proto::state::Purged,
    ) -> Result<SessionRemoval, Error> {
        self.ask(|reply| Req::Remove {
            name: name.into(),
            by: "user".into(),
            reason: reason.into(),
            live_agents: Vec::new(),
            purged: Some(purged),
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
        rename: std::collections::BTreeMap<String, String>,
    ) -> Result<grove_proto::methods::SessionMigrateResult, Error> {
        self.ask(|reply| Req::Migrate {
            name: name.into(),
            schema,
            drop,
            rename,
            reply,
        })
        .await
    }

    /// Moves every session along its lifecycle; `agents` is what the agents of each
    /// session did.
    pub async fn gc(
        &self,
        agents: gc::AgentActivity,
        lifecycle: crate::config::SessionLifecycle,
    ) -> Result<gc::GcReport, Error> {
        self.ask(|reply| Req::Gc {
            agents,
            lifecycle,
            reply,
        })
        .await
    }

    /// What each tree of agents holds in the database (`tree_max_db`).
    pub fn tree_db(&self) -> &super::budget::TreeDb {
        &self.budget
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

//! Sessions whose head is not in memory (suspended, archived, evicted, or not used since
//! the start) are dormant: the state task keeps of each only what the lifecycle pass
//! needs, a few words under its name, and reads the rest of its row when a request
//! names it (it is then resident until its head leaves memory again). A daemon with
//! 100,000 stored sessions holds about 100 bytes for each, not a `Session`, and reads
//! nothing but these columns at start.

use super::session::{Lifecycle, Session};
use super::{handle::Req, store, StateService};
use crate::db::Db;
use crate::error::Error;
use grove_proto::state::SessionInfo;
use grove_state::Schema;
use std::collections::{HashMap, HashSet};

/// What the lifecycle pass reads of a session not in memory; everything else is in its
/// row.
#[derive(Debug, Clone, Copy)]
pub struct Dormant {
    /// Its last write, or its creation.
    pub written_ms: u64,
    pub last_used_ms: u64,
    pub lifecycle: Lifecycle,
    pub reserved: bool,
}

/// Every dormant session, by name.
pub type DormantMap = HashMap<Box<str>, Dormant>;

impl Dormant {
    pub fn of(session: &Session) -> Dormant {
        Dormant {
            written_ms: session.last_at_ms.unwrap_or(session.created_at_ms),
            last_used_ms: session.last_used_ms,
            lifecycle: session.lifecycle,
            reserved: session.reserved,
        }
    }
}

impl Req {
    /// The sessions this request names (read, written, or to be created).
    fn sessions(&self) -> Vec<&str> {
        match self {
            Req::Update { session, .. }
            | Req::Get { session, .. }
            | Req::History { session, .. }
            | Req::Pin { session, .. }
            | Req::Compact { session, .. } => vec![session],
            Req::Fork {
                session,
                new_session,
                ..
            } => vec![session, new_session],
            Req::Ensure { name, .. }
            | Req::Info { name, .. }
            | Req::Remove { name, .. }
            | Req::Migrate { name, .. }
            | Req::DropUnused { name } => vec![name],
            Req::List { .. } | Req::Gc { .. } => Vec::new(),
        }
    }
}

impl StateService {
    /// Makes the dormant sessions `req` names resident; the names of those it woke.
    pub(super) async fn wake_for(&mut self, req: &Req) -> Result<Vec<String>, Error> {
        let mut woken = Vec::new();
        for name in req.sessions() {
            if self.wake(name).await? {
                woken.push(name.to_string());
            }
        }
        Ok(woken)
    }

    /// Reads the row of `name` if it is dormant (not its head: that is `use_session`'s);
    /// whether it was.
    pub(super) async fn wake(&mut self, name: &str) -> Result<bool, Error> {
        if !self.dormant.contains_key(name) {
            return Ok(false);
        }
        let owned = name.to_string();
        let stored = self
            .db
            .call(move |conn| {
                let Some(row) = store::load_session(conn, &owned)? else {
                    return Ok(None);
                };
                Ok(Some((row, store::session_pins(conn, &owned)?)))
            })
            .await?;
        self.dormant.remove(name);
        if let Some((row, pins)) = stored {
            let mut session = Session::from_row(row);
            session.pins = pins;
            self.sessions.insert(name.to_string(), session);
        }
        Ok(true)
    }

    /// Makes `name` dormant again if its head is not in memory and nothing of it waits
    /// to be stored. A session refused since a failed write stays, with why.
    pub(super) fn doze(&mut self, name: &str) {
        let resting = self
            .sessions
            .get(name)
            .is_some_and(|s| !s.loaded && s.unreadable.is_none());
        if !resting || self.pending.iter().any(|p| p.event.session == name) {
            return;
        }
        if let Some(session) = self.sessions.remove(name) {
            self.dormant.insert(name.into(), Dormant::of(&session));
        }
    }

    /// Every listed session: those resident from memory now, the dormant ones from
    /// their rows, read off this task.
    pub(super) fn list(&self, reply: super::Reply<Vec<SessionInfo>>) {
        let mut all: Vec<SessionInfo> = self
            .sessions
            .values()
            .filter(|s| !s.reserved)
            .map(Session::info)
            .collect();
        let resident: HashSet<String> = self.sessions.keys().cloned().collect();
        let db = self.db.clone();
        tokio::spawn(async move {
            let listed = match dormant_infos(&db, resident).await {
                Ok(infos) => {
                    all.extend(infos);
                    all.sort_by(|a, b| a.name.cmp(&b.name));
                    Ok(all)
                }
                Err(e) => Err(e),
            };
            let _ = reply.send(listed);
        });
    }
}

/// The stored sessions but `resident` and the reserved ones, as listed.
async fn dormant_infos(db: &Db, resident: HashSet<String>) -> Result<Vec<SessionInfo>, Error> {
    let mut infos = Vec::new();
    let mut schemas: HashMap<String, Result<Schema, String>> = HashMap::new();
    let mut after = 0;
    loop {
        let page = db
            .call(move |conn| store::load_sessions_page(conn, after, super::LOAD_PAGE))
            .await?;
        let Some(&(last, ..)) = page.last() else {
            return Ok(infos);
        };
        after = last;
        for (_, row, text) in page {
            if row.reserved || resident.contains(&row.name) {
                continue;
            }
            let parsed = schemas
                .entry(text)
                .or_insert_with_key(|text| super::parse_schema(text));
            infos.push(Session::from_parsed(row, parsed.clone()).info());
        }
    }
}

//! Sessions and their shared state. One task owns every session's head state; updates
//! are applied one by one in arrival order, and those applied while the database
//! stores the group before them are stored together in one transaction (group commit),
//! then acknowledged: throughput without giving up "an acknowledged batch is durable".
//! The task never waits for the disk while updates arrive: it applies the next group
//! while the database thread stores (and fsyncs) the one before.

pub mod code;
pub mod code_ref;
mod commit;
mod eras;
pub mod gc;
mod handle;
mod migrate;
mod requests;
mod scan;
mod session;
mod store;

use commit::{next_stored, Outbox, Pending, StoreJob, Stored};
use handle::Req;
pub use handle::StateHandle;

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
use store::{CheckpointRow, Compaction, DroppedCode, SessionHead, SNAPSHOT_EVERY};
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
            Ok(sessions) => {
                service.sessions = sessions;
                tokio::spawn(code::sweep_orphan_refs(service.db.clone()));
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the sessions; shared state is unavailable");
                let why = Arc::new(e);
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
fn refuse(req: Req, why: &Arc<Error>) {
    let e = || Error::SessionsUnreadable(why.clone());
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

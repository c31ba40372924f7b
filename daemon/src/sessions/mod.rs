//! Sessions and their shared state. One task owns every session's head state; updates
//! are applied one by one in arrival order, and those applied while the database
//! stores the group before them are stored together in one transaction (group commit),
//! then acknowledged: throughput without giving up "an acknowledged batch is durable".
//! The task never waits for the disk while updates arrive: it applies the next group
//! while the database thread stores (and fsyncs) the one before.

pub mod budget;
pub mod code;
pub mod code_ref;
mod commit;
mod convert;
mod dormant;
mod eras;
pub mod gc;
mod handle;
mod migrate;
mod packed;
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
use grove_proto::now_ms;
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
    /// The sessions whose head is in memory, or that a request is using now.
    sessions: HashMap<String, Session>,
    /// Every other stored session, in a few words each (`dormant.rs`).
    dormant: dormant::DormantMap,
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
    /// What each tree of agents holds in the database (`tree_max_db`).
    budget: Arc<budget::TreeDb>,
}

enum Next {
    Request(Req),
    Stored(Stored),
    Stop,
}

/// Sessions' rows read per database call at start: the database thread is never held
/// for long by the read of all of them, so that start-up's other calls pass between.
const LOAD_PAGE: usize = 2_000;

/// Every stored session, dormant: rows and heads are read on first use, not here.
async fn load_sessions(db: &Db) -> Result<dormant::DormantMap, Error> {
    let mut sessions = dormant::DormantMap::new();
    let mut after = 0;
    loop {
        let page = db
            .call(move |conn| store::dormant_page(conn, after, LOAD_PAGE))
            .await?;
        let Some(&(last, ..)) = page.last() else {
            break;
        };
        after = last;
        sessions.reserve(page.len());
        sessions.extend(page.into_iter().map(|(_, name, d)| (name, d)));
    }
    sessions.shrink_to_fit();
    Ok(sessions)
}

/// The sessions, and what each tree holds counted from the rows (before any update is
/// taken, so that a restart resets no tree's count), a page per database call.
async fn load_all(db: &Db, budget: &budget::TreeDb) -> Result<dormant::DormantMap, Error> {
    let sessions = load_sessions(db).await?;
    let mut agents = Vec::new();
    let mut after = 0;
    loop {
        let page = db
            .call(move |conn| store::agent_rows_page(conn, after, LOAD_PAGE))
            .await?;
        let Some(&(last, _)) = page.last() else {
            break;
        };
        after = last;
        agents.extend(page.into_iter().map(|(_, row)| row));
    }
    let mut names: Vec<&str> = sessions.keys().map(|name| &**name).collect();
    names.sort_unstable();
    let starts: Vec<String> = names
        .into_iter()
        .step_by(LOAD_PAGE)
        .map(str::to_string)
        .collect();
    let mut writers = budget::WriterBytes::new();
    for (n, from) in starts.iter().enumerate() {
        let (from, to) = (from.clone(), starts.get(n + 1).cloned());
        let range = db
            .call(move |conn| store::range_writer_bytes(conn, &from, to.as_deref()))
            .await?;
        for (writer, bytes) in range {
            *writers.entry(writer).or_default() += bytes;
        }
    }
    budget.load(agents, writers);
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
    let budget = Arc::new(budget::TreeDb::new(limits.tree_max_db));
    let mut service = StateService {
        sessions: HashMap::new(),
        dormant: dormant::DormantMap::new(),
        cache: lifecycle.cache,
        limits,
        db,
        events,
        outbox: Arc::default(),
        pending: VecDeque::new(),
        jobs: VecDeque::new(),
        budget: budget.clone(),
    };
    tokio::spawn(async move {
        match load_all(&service.db, &service.budget).await {
            Ok(sessions) => {
                service.dormant = sessions;
                tokio::spawn(code::sweep_orphan_refs(service.db.clone()));
            }
            Err(e) => {
                service.budget.unreadable();
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
        budget,
    })
}

/// Answers a request with `why` (the sessions could not be read).
fn refuse(req: Req, why: &Arc<Error>) {
    fail(req, Error::SessionsUnreadable(why.clone()));
}

/// Answers a request with `e`.
fn fail(req: Req, e: Error) {
    match req {
        Req::Update { reply, .. } => drop(reply.send(Err(e))),
        Req::Ensure { reply, .. } => drop(reply.send(Err(e))),
        Req::Get { reply, .. } => drop(reply.send(Err(e))),
        Req::History { reply, .. } => drop(reply.send(Err(e))),
        Req::Pin { reply, .. } => drop(reply.send(Err(e))),
        Req::Fork { reply, .. } => drop(reply.send(Err(e))),
        Req::Compact { reply, .. } => drop(reply.send(Err(e))),
        Req::Info { reply, .. } => drop(reply.send(Err(e))),
        Req::List { reply } => drop(reply.send(Err(e))),
        Req::Remove { reply, .. } => drop(reply.send(Err(e))),
        Req::Migrate { reply, .. } => drop(reply.send(Err(e))),
        Req::Gc { reply, .. } => drop(reply.send(Err(e))),
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
        started_with(StateLimits::default()).await
    }

    async fn started_with(
        limits: StateLimits,
    ) -> (tempfile::TempDir, Db, StateHandle, watch::Sender<bool>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(&dir.path().join("grove.db")).expect("db");
        let (state, stop) = service_on(&db, limits).await;
        state
            .ensure("s", Some(counter()), true)
            .await
            .expect("ensure");
        (dir, db, state, stop)
    }

    fn counter() -> Schema {
        Schema::from_json(&json!({
            "version": 1,
            "channels": { "n": { "reducer": "add" } }
        }))
        .expect("schema")
    }

    async fn service_on(db: &Db, limits: StateLimits) -> (StateHandle, watch::Sender<bool>) {
        let (stop, stopped) = watch::channel(false);
        let state = start(
            db.clone(),
            EventBus::default(),
            limits,
            crate::config::SessionLifecycle::default(),
            stopped,
        )
        .await
        .expect("start");
        (state, stop)
    }

    /// Agent `child` of the tree of agent `root`, on record, both in session `s`.
    async fn on_record(db: &Db, root: &str, child: &str) {
        on_record_in(db, (root, "s"), (child, "s")).await;
    }

    /// A root agent and its child, on record with their sessions.
    async fn on_record_in(db: &Db, (root, a): (&str, &str), (child, b): (&str, &str)) {
        let rows = [
            (root.to_string(), None, a.to_string()),
            (child.to_string(), Some(root.to_string()), b.to_string()),
        ];
        db.call(move |conn| {
            for (id, parent, session) in &rows {
                let record = json!({ "id": id, "parent": parent, "session": session }).to_string();
                conn.execute(
                    "INSERT INTO agents (id, status, created_at_ms, token, record)
                     VALUES (?1, 'running', 1, ?1, ?2)",
                    rusqlite::params![id, record],
                )?;
            }
            Ok(())
        })
        .await
        .expect("agents");
    }

    /// Writes of agent `a1` of tree `r` until one is refused: how many were stored.
    async fn writes_until_refused(state: &StateHandle, most: u64) -> u64 {
        for n in 0..most {
            let written = state
                .update_in_tree("s", "a1", Some("r"), add_one(), None, None)
                .await;
            match written {
                Ok(_) => {}
                Err(Error::TreeDbFull(why)) => {
                    assert!(why.contains("tree_max_db"), "{why}");
                    return n;
                }
                Err(e) => panic!("{e}"),
            }
        }
        most
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

    /// A small share: about a hundred of these checkpoints.
    const SMALL_SHARE: StateLimits = StateLimits {
        max_write: 256 << 10,
        max_session: 2 << 20,
        checkpoint_keep: 400,
        tree_max_db: 30_000,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trees_share_holds_across_a_restart_and_the_user_still_writes() {
        let (_dir, db, state, stop) = started_with(SMALL_SHARE).await;
        on_record(&db, "r", "a1").await;
        let (state, stop) = {
            // The agents are on record before the count is read, as in a daemon.
            let _ = stop.send(true);
            drop(state);
            service_on(&db, SMALL_SHARE).await
        };
        let stored = writes_until_refused(&state, 1000).await;
        assert!((50..200).contains(&stored), "{stored} writes stored");
        assert_eq!(
            stored_checkpoints(&db).await,
            stored,
            "a refused write stores nothing"
        );
        state
            .update("s", "user", add_one(), None, None)
            .await
            .expect("the user's write");
        let _ = stop.send(true);
        drop(state);
        let (state, _stop) = service_on(&db, SMALL_SHARE).await;
        assert_eq!(
            writes_until_refused(&state, 1000).await,
            0,
            "reset by a restart"
        );
        // Deleting the session gives its bytes back.
        state
            .remove("s", "user", "test", Vec::new())
            .await
            .expect("rm");
        state
            .ensure("s", Some(counter()), true)
            .await
            .expect("again");
        assert_eq!(writes_until_refused(&state, 10).await, 10, "given back");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compaction_gives_a_trees_bytes_back() {
        let limits = StateLimits {
            checkpoint_keep: 2,
            ..SMALL_SHARE
        };
        let (_dir, db, state, _stop) = started_with(limits).await;
        assert_eq!(writes_until_refused(&state, 1000).await, 1000);
        assert!(stored_checkpoints(&db).await < 100);
        // What was counted as it was written, less what compactions gave back, is what
        // a start reads from the rows (snapshots included).
        let stored = db
            .call(|conn| store::session_writer_bytes(conn, "s"))
            .await
            .expect("read back");
        assert_eq!(
            stored.get("a1").copied(),
            Some(state.tree_db().used("r") as i64)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_childs_own_session_counts_for_its_tree_at_start() {
        let schema = counter().to_json().to_string().len() as u64;
        let mut counted = Vec::new();
        for child_session in ["own", "s"] {
            let (_dir, db, state, stop) = started_with(SMALL_SHARE).await;
            state
                .ensure("own", Some(counter()), true)
                .await
                .expect("own");
            on_record_in(&db, ("r", "s"), ("c", child_session)).await;
            let _ = stop.send(true);
            drop(state);
            let (state, _stop) = service_on(&db, SMALL_SHARE).await;
            // Answered once the count is read.
            state.list().await.expect("list");
            counted.push(state.tree_db().used("r"));
        }
        // Its own session's row is the child's spawn's; its parent's session is not.
        assert_eq!(counted[0], counted[1] + schema + 2, "{counted:?}");
    }
}

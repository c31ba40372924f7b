//! One file per method. The dispatch decides which callers a method is for (the user
//! only, or an agent on its own session: see authority.rs); a handler that acts on
//! agents gets the connection too, to find them among those its caller may see.

mod admit;
pub mod agent_activity;
pub mod agent_attach;
pub mod agent_screen;
pub mod agent_send;
pub mod answer;
pub mod ask;
pub mod authority;
pub mod daemon_metrics;
pub mod daemon_probe;
pub mod daemon_status;
pub mod daemon_stop;
pub mod diff;
pub mod discard;
pub mod events_subscribe;
pub mod gc;
pub mod gc_log;
pub mod get;
pub mod hello;
pub mod kill;
pub mod list;
pub mod logs;
pub mod merged;
pub mod pause;
pub mod queue;
pub mod remove;
pub mod repo_lease;
pub mod report;
pub mod restore;
pub mod salvaged;
pub mod session_create;
pub mod session_list;
pub mod session_migrate;
pub mod session_purge;
pub mod session_rm;
pub mod session_show;
pub mod spawn;
pub mod state_code;
pub mod state_compact;
pub mod state_fork;
pub mod state_get;
pub mod state_history;
pub mod state_pin;
pub mod state_update;
pub mod state_watch;
pub mod trust;
pub mod wait;

use super::connection::Conn;
use super::Ctx;
pub use admit::parse;
use admit::{admit, admit_on_session};
use grove_proto::methods::{self as m, Method};
use grove_proto::{codes, RpcError, MAX_LINE_BYTES};
use serde::Serialize;
use serde_json::Value;

/// A result already serialized as JSON: handlers serialize their typed result straight
/// to bytes, since a `Value` tree in between cost more than the serialization itself
/// for long answers.
pub struct Json(Vec<u8>);

impl Json {
    pub fn of<T: Serialize>(value: &T) -> Result<Json, RpcError> {
        serde_json::to_vec(value)
            .map(Json)
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, format!("cannot encode result: {e}")))
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// A result stored as JSON text earlier (an idempotency key's answer).
    pub fn raw(bytes: Vec<u8>) -> Json {
        Json(bytes)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

pub type Answer = Result<Json, RpcError>;

/// Runs one method. `None` means the handler answered by itself (subscriptions answer
/// first, then stream notifications; agent.list answers, then cleans up).
pub async fn dispatch(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    method: &str,
    params: Option<Value>,
) -> Option<Answer> {
    route(ctx, conn, id, method, params)
        .await
        .unwrap_or_else(|refused| Some(Err(refused)))
}

/// `dispatch`, where params that do not decode, or a caller the method is not for, are
/// the answer.
async fn route(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    method: &str,
    params: Option<Value>,
) -> Result<Option<Answer>, RpcError> {
    Ok(match method {
        m::StateWatch::NAME => {
            let (caller, _) = admit_on_session::<m::StateWatch>(ctx, conn, params).await?;
            state_watch::handle(ctx, conn, id, caller).await
        }
        m::EventsSubscribe::NAME => {
            events_subscribe::handle(ctx, conn, id, admit::<m::EventsSubscribe>(conn, params)?)
                .await
        }
        m::Attach::NAME => {
            agent_attach::handle(ctx, conn, id, admit::<m::Attach>(conn, params)?).await
        }
        m::Lease::NAME => {
            let params = admit::<m::Lease>(conn, params)?;
            repo_lease::handle(ctx, conn, id, params).await
        }
        m::List::NAME => {
            list::handle(ctx, conn, id, admit::<m::List>(conn, params)?).await;
            None
        }
        _ => Some(call(ctx, conn, method, params).await),
    })
}

/// The methods that answer once. Who may call each is its method's `CALLERS`, which
/// `admit` and `admit_on_session` apply (a handler that acts on agents also finds them
/// among those the caller may see).
async fn call(ctx: &Ctx, conn: &Conn, method: &str, params: Option<Value>) -> Answer {
    match method {
        // Boxed: a spawn's future is 6 KiB, three times any other's, and every request's
        // task would carry (and copy) that much; spawns are few.
        m::Spawn::NAME => {
            reply(Box::pin(spawn::handle(ctx, conn, admit::<m::Spawn>(conn, params)?)).await)
        }
        m::Get::NAME => reply(get::handle(ctx, conn, admit::<m::Get>(conn, params)?).await),
        m::Wait::NAME => reply(wait::handle(ctx, conn, admit::<m::Wait>(conn, params)?).await),
        m::Kill::NAME => reply(kill::handle(ctx, conn, admit::<m::Kill>(conn, params)?).await),
        m::Pause::NAME => {
            reply(pause::handle(ctx, conn, admit::<m::Pause>(conn, params)?, true).await)
        }
        m::Resume::NAME => {
            reply(pause::handle(ctx, conn, admit::<m::Resume>(conn, params)?, false).await)
        }
        m::Report::NAME => {
            reply(report::handle(ctx, conn, admit::<m::Report>(conn, params)?).await)
        }
        m::Send::NAME => {
            reply(agent_send::handle(ctx, conn, admit::<m::Send>(conn, params)?).await)
        }
        m::Screen::NAME => {
            reply(agent_screen::handle(ctx, conn, admit::<m::Screen>(conn, params)?).await)
        }
        m::SetActivity::NAME => {
            reply(agent_activity::handle(ctx, conn, admit::<m::SetActivity>(conn, params)?).await)
        }
        m::Ask::NAME => reply(ask::handle(ctx, conn, admit::<m::Ask>(conn, params)?).await),
        m::Answer::NAME => {
            reply(answer::handle(ctx, conn, admit::<m::Answer>(conn, params)?).await)
        }
        m::Logs::NAME => reply(logs::handle(ctx, conn, admit::<m::Logs>(conn, params)?).await),
        m::Diff::NAME => reply(diff::handle(ctx, conn, admit::<m::Diff>(conn, params)?).await),
        m::Queue::NAME => {
            admit::<m::Queue>(conn, params)?;
            reply(queue::handle(ctx).await)
        }
        m::Remove::NAME => {
            let params = admit::<m::Remove>(conn, params)?;
            reply(remove::handle(ctx, params).await)
        }
        m::Discard::NAME => {
            let params = admit::<m::Discard>(conn, params)?;
            reply(discard::handle(ctx, params).await)
        }
        m::Merged::NAME => {
            let params = admit::<m::Merged>(conn, params)?;
            reply(merged::handle(ctx, params).await)
        }
        m::Gc::NAME => {
            let params = admit::<m::Gc>(conn, params)?;
            reply(gc::handle(ctx, params).await)
        }
        m::GcLog::NAME => {
            let params = admit::<m::GcLog>(conn, params)?;
            reply(gc_log::handle(ctx, params).await)
        }
        m::Salvaged::NAME => {
            admit::<m::Salvaged>(conn, params)?;
            reply(salvaged::handle(ctx).await)
        }
        m::Restore::NAME => {
            let params = admit::<m::Restore>(conn, params)?;
            reply(restore::handle(ctx, params).await)
        }
        m::Trust::NAME => {
            let params = admit::<m::Trust>(conn, params)?;
            reply(trust::handle(ctx, params).await)
        }
        m::SessionCreate::NAME => {
            let params = admit::<m::SessionCreate>(conn, params)?;
            reply(session_create::handle(ctx, params).await)
        }
        m::SessionList::NAME => {
            reply(session_list::handle(ctx, conn, admit::<m::SessionList>(conn, params)?).await)
        }
        m::SessionShow::NAME => {
            reply(session_show::handle(ctx, conn, admit::<m::SessionShow>(conn, params)?).await)
        }
        m::StateUpdate::NAME => {
            let (caller, params) = admit_on_session::<m::StateUpdate>(ctx, conn, params).await?;
            reply(state_update::handle(ctx, conn, caller, params).await)
        }
        m::StateGet::NAME => {
            let (caller, params) = admit_on_session::<m::StateGet>(ctx, conn, params).await?;
            reply(state_get::handle(ctx, caller, params).await)
        }
        m::StateHistory::NAME => {
            let (caller, params) = admit_on_session::<m::StateHistory>(ctx, conn, params).await?;
            reply(state_history::handle(ctx, caller, params).await)
        }
        m::StateFork::NAME => {
            let (caller, params) = admit_on_session::<m::StateFork>(ctx, conn, params).await?;
            reply(state_fork::handle(ctx, caller, params).await)
        }
        m::StateCode::NAME => {
            let (caller, params) = admit_on_session::<m::StateCode>(ctx, conn, params).await?;
            reply(state_code::handle(ctx, caller, params).await)
        }
        m::StateCompact::NAME => {
            let params = admit::<m::StateCompact>(conn, params)?;
            reply(state_compact::handle(ctx, params).await)
        }
        m::SessionMigrate::NAME => {
            let params = admit::<m::SessionMigrate>(conn, params)?;
            reply(session_migrate::handle(ctx, params).await)
        }
        m::SessionRm::NAME => {
            let params = admit::<m::SessionRm>(conn, params)?;
            reply(session_rm::handle(ctx, params).await)
        }
        m::StatePin::NAME => {
            let params = admit::<m::StatePin>(conn, params)?;
            reply(state_pin::handle(ctx, params).await)
        }
        m::DaemonStatus::NAME => {
            admit::<m::DaemonStatus>(conn, params)?;
            reply(daemon_status::handle(ctx).await)
        }
        m::DaemonMetrics::NAME => {
            admit::<m::DaemonMetrics>(conn, params)?;
            reply(daemon_metrics::handle(ctx).await)
        }
        m::DaemonProbe::NAME => {
            admit::<m::DaemonProbe>(conn, params)?;
            reply(daemon_probe::handle().await)
        }
        m::DaemonStop::NAME => {
            admit::<m::DaemonStop>(conn, params)?;
            reply(daemon_stop::handle(ctx).await)
        }
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method `{other}`; docs/protocol.md lists the methods"),
        )),
    }
}

/// A paged answer's items, or a page of text once escaped into JSON, take at most this
/// many bytes: inside the line cap with room for the envelope.
pub const MAX_PAGE_BYTES: usize = MAX_LINE_BYTES - 64 * 1024;

/// How many of the first items fit in a page of JSON (at least one).
pub fn fitting_a_page<T: Serialize>(items: &[T]) -> usize {
    let mut bytes = 0;
    for (n, item) in items.iter().enumerate() {
        bytes += crate::sessions::json_bytes(item) + 1;
        if n > 0 && bytes > MAX_PAGE_BYTES as u64 {
            return n;
        }
    }
    items.len()
}

/// Who is asking about which session. Inside an agent (its process tree or its token)
/// the session is the agent's own and naming another is refused; the user names one.
pub struct Caller {
    pub session: String,
    pub writer: String,
    /// The caller is an agent (`writer` is its id), not the user.
    pub agent: bool,
    /// An agent caller's tree (its root), whose share of the database its writes use.
    pub tree: Option<String>,
}

/// The repository a client named, which must be an absolute path (the daemon's
/// working directory is not the client's).
pub async fn client_repo(
    path: &std::path::Path,
) -> Result<crate::git::target::RepoTarget, crate::Error> {
    if !path.is_absolute() {
        return Err(crate::Error::BadInput(format!(
            "repo path `{}` must be absolute",
            path.display()
        )));
    }
    let repo = path.to_path_buf();
    tokio::task::spawn_blocking(move || crate::git::target::resolve_repo(&repo)).await?
}

fn reply<T: Serialize>(result: Result<T, crate::Error>) -> Answer {
    Json::of(&result.map_err(RpcError::from)?)
}

//! One file per method. Each handler gets the connection too: its authority (see
//! authority.rs) decides what a caller inside an agent may do.

pub mod agent_activity;
pub mod agent_attach;
pub mod agent_screen;
pub mod agent_send;
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
use grove_proto::methods::{self as m, Method};
use grove_proto::{codes, RpcError};
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
    match method {
        m::StateWatch::NAME => match parse::<m::StateWatch>(params) {
            Ok(params) => state_watch::handle(ctx, conn, id, params).await,
            Err(e) => Some(Err(e)),
        },
        m::EventsSubscribe::NAME => match parse::<m::EventsSubscribe>(params) {
            Ok(params) => events_subscribe::handle(ctx, conn, id, params).await,
            Err(e) => Some(Err(e)),
        },
        m::Attach::NAME => match parse::<m::Attach>(params) {
            Ok(params) => agent_attach::handle(ctx, conn, id, params).await,
            Err(e) => Some(Err(e)),
        },
        m::Lease::NAME => match parse::<m::Lease>(params) {
            Ok(params) => repo_lease::handle(ctx, conn, id, params).await,
            Err(e) => Some(Err(e)),
        },
        m::List::NAME => match parse::<m::List>(params) {
            Ok(params) => {
                list::handle(ctx, conn, id, params).await;
                None
            }
            Err(e) => Some(Err(e)),
        },
        _ => Some(call(ctx, conn, method, params).await),
    }
}

async fn call(ctx: &Ctx, conn: &Conn, method: &str, params: Option<Value>) -> Answer {
    match method {
        m::Spawn::NAME => reply(spawn::handle(ctx, conn, parse::<m::Spawn>(params)?).await),
        m::Get::NAME => reply(get::handle(ctx, conn, parse::<m::Get>(params)?).await),
        m::Wait::NAME => reply(wait::handle(ctx, conn, parse::<m::Wait>(params)?).await),
        m::Kill::NAME => reply(kill::handle(ctx, conn, parse::<m::Kill>(params)?).await),
        m::Pause::NAME => reply(pause::handle(ctx, conn, parse::<m::Pause>(params)?, true).await),
        m::Resume::NAME => {
            reply(pause::handle(ctx, conn, parse::<m::Resume>(params)?, false).await)
        }
        m::Report::NAME => reply(report::handle(ctx, conn, parse::<m::Report>(params)?).await),
        m::Send::NAME => reply(agent_send::handle(ctx, conn, parse::<m::Send>(params)?).await),
        m::Screen::NAME => {
            reply(agent_screen::handle(ctx, conn, parse::<m::Screen>(params)?).await)
        }
        m::SetActivity::NAME => {
            reply(agent_activity::handle(ctx, conn, parse::<m::SetActivity>(params)?).await)
        }
        m::Logs::NAME => reply(logs::handle(ctx, conn, parse::<m::Logs>(params)?).await),
        m::Diff::NAME => reply(diff::handle(ctx, conn, parse::<m::Diff>(params)?).await),
        m::Queue::NAME => {
            parse::<m::Queue>(params)?;
            reply(queue::handle(ctx, conn).await)
        }
        m::Remove::NAME => reply(remove::handle(ctx, conn, parse::<m::Remove>(params)?).await),
        m::Discard::NAME => reply(discard::handle(ctx, conn, parse::<m::Discard>(params)?).await),
        m::Merged::NAME => reply(merged::handle(ctx, conn, parse::<m::Merged>(params)?).await),
        m::Gc::NAME => reply(gc::handle(ctx, conn, parse::<m::Gc>(params)?).await),
        m::GcLog::NAME => reply(gc_log::handle(ctx, conn, parse::<m::GcLog>(params)?).await),
        m::Salvaged::NAME => {
            parse::<m::Salvaged>(params)?;
            reply(salvaged::handle(ctx, conn).await)
        }
        m::Restore::NAME => reply(restore::handle(ctx, conn, parse::<m::Restore>(params)?).await),
        m::Trust::NAME => reply(trust::handle(ctx, conn, parse::<m::Trust>(params)?).await),
        m::SessionCreate::NAME => {
            reply(session_create::handle(ctx, conn, parse::<m::SessionCreate>(params)?).await)
        }
        m::SessionList::NAME => {
            reply(session_list::handle(ctx, conn, parse::<m::SessionList>(params)?).await)
        }
        m::SessionShow::NAME => {
            reply(session_show::handle(ctx, conn, parse::<m::SessionShow>(params)?).await)
        }
        m::StateUpdate::NAME => {
            reply(state_update::handle(ctx, conn, parse::<m::StateUpdate>(params)?).await)
        }
        m::StateGet::NAME => {
            reply(state_get::handle(ctx, conn, parse::<m::StateGet>(params)?).await)
        }
        m::StateHistory::NAME => {
            reply(state_history::handle(ctx, conn, parse::<m::StateHistory>(params)?).await)
        }
        m::StateFork::NAME => {
            reply(state_fork::handle(ctx, conn, parse::<m::StateFork>(params)?).await)
        }
        m::StateCode::NAME => {
            reply(state_code::handle(ctx, conn, parse::<m::StateCode>(params)?).await)
        }
        m::StateCompact::NAME => {
            reply(state_compact::handle(ctx, conn, parse::<m::StateCompact>(params)?).await)
        }
        m::SessionMigrate::NAME => {
            reply(session_migrate::handle(ctx, conn, parse::<m::SessionMigrate>(params)?).await)
        }
        m::SessionRm::NAME => {
            reply(session_rm::handle(ctx, conn, parse::<m::SessionRm>(params)?).await)
        }
        m::StatePin::NAME => {
            reply(state_pin::handle(ctx, conn, parse::<m::StatePin>(params)?).await)
        }
        m::DaemonStatus::NAME => {
            parse::<m::DaemonStatus>(params)?;
            reply(daemon_status::handle(ctx).await)
        }
        m::DaemonMetrics::NAME => {
            parse::<m::DaemonMetrics>(params)?;
            reply(daemon_metrics::handle(ctx, conn).await)
        }
        m::DaemonProbe::NAME => {
            parse::<m::DaemonProbe>(params)?;
            reply(daemon_probe::handle(conn).await)
        }
        m::DaemonStop::NAME => {
            parse::<m::DaemonStop>(params)?;
            reply(daemon_stop::handle(ctx, conn).await)
        }
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("unknown method `{other}`; docs/protocol.md lists the methods"),
        )),
    }
}

/// Decodes the params of method `M`; absent params count as `{}`.
pub fn parse<M: Method>(params: Option<Value>) -> Result<M::Params, RpcError> {
    let params = params.unwrap_or_else(|| Value::Object(Default::default()));
    serde_json::from_value(params).map_err(|e| {
        RpcError::new(
            codes::INVALID_PARAMS,
            format!("invalid params for {}: {e}", M::NAME),
        )
    })
}

/// Who is asking about which session. Inside an agent (its process tree or its token)
/// the session is the agent's own and naming another is refused; the user names one.
pub struct Caller {
    pub session: String,
    pub writer: String,
    /// The caller is an agent (`writer` is its id), not the user.
    pub agent: bool,
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

/// Parameters of a method that acts on a session: the session named (the user's
/// choice) and the token (an agent's proof of who it is).
pub trait SessionScoped {
    fn session(&self) -> Option<&str>;
    fn token(&self) -> Option<&str>;
}

macro_rules! session_scoped {
    ($($params:ty),* $(,)?) => {$(
        impl SessionScoped for $params {
            fn session(&self) -> Option<&str> {
                self.session.as_deref()
            }
            fn token(&self) -> Option<&str> {
                self.token.as_deref()
            }
        }
    )*};
}

session_scoped!(
    m::StateCodeParams,
    m::StateForkParams,
    m::StateGetParams,
    m::StateHistoryParams,
    m::StateUpdateParams,
    m::StateWatchParams,
);

/// Who acts on which session: an agent on its own only, the user on the one named.
pub async fn caller(
    ctx: &Ctx,
    conn: &Conn,
    params: &impl SessionScoped,
) -> Result<Caller, crate::Error> {
    let (session, token) = (params.session(), params.token());
    match authority::acting_agent(ctx, conn, token).await? {
        Some(agent) => {
            if let Some(named) = session.filter(|named| *named != agent.session) {
                return Err(crate::Error::Refused(format!(
                    "agent {} may use only its own session `{}`, not `{named}`",
                    agent.id, agent.session
                )));
            }
            Ok(Caller {
                session: agent.session,
                writer: agent.id,
                agent: true,
            })
        }
        None => Ok(Caller {
            session: session
                .ok_or_else(|| {
                    crate::Error::BadInput(
                        "say which session: --session NAME (inside an agent GROVE_SESSION \
                         and GROVE_TOKEN say it)"
                            .into(),
                    )
                })?
                .to_string(),
            writer: "user".into(),
            agent: false,
        }),
    }
}

fn reply<T: Serialize>(result: Result<T, crate::Error>) -> Answer {
    Json::of(&result.map_err(RpcError::from)?)
}

//! One file per method.

pub mod daemon_status;
pub mod daemon_stop;
pub mod gc;
pub mod gc_log;
pub mod get;
pub mod hello;
pub mod kill;
pub mod list;
pub mod queue;
pub mod remove;
pub mod restore;
pub mod salvaged;
pub mod session_create;
pub mod session_list;
pub mod session_show;
pub mod spawn;
pub mod state_compact;
pub mod state_fork;
pub mod state_get;
pub mod state_history;
pub mod state_update;
pub mod state_watch;
pub mod wait;

use super::connection::Conn;
use super::Ctx;
use grove_proto::methods::{self, Method};
use grove_proto::{codes, RpcError};
use serde::Serialize;
use serde_json::Value;

/// Runs one method. `None` means the handler answered by itself (subscriptions answer
/// first, then stream notifications).
pub async fn dispatch(
    ctx: &Ctx,
    conn: &Conn,
    id: Option<Value>,
    method: &str,
    params: Option<Value>,
) -> Option<Result<Value, RpcError>> {
    if method == methods::StateWatch::NAME {
        return match parse::<methods::StateWatch>(params) {
            Ok(params) => state_watch::handle(ctx, conn, id, params).await,
            Err(e) => Some(Err(e)),
        };
    }
    Some(call(ctx, method, params).await)
}

async fn call(ctx: &Ctx, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
    match method {
        methods::Spawn::NAME => reply(spawn::handle(ctx, parse::<methods::Spawn>(params)?).await),
        methods::List::NAME => reply(list::handle(ctx, parse::<methods::List>(params)?).await),
        methods::Get::NAME => reply(get::handle(ctx, parse::<methods::Get>(params)?).await),
        methods::Wait::NAME => reply(wait::handle(ctx, parse::<methods::Wait>(params)?).await),
        methods::Kill::NAME => reply(kill::handle(ctx, parse::<methods::Kill>(params)?).await),
        methods::Queue::NAME => {
            parse::<methods::Queue>(params)?;
            reply(queue::handle(ctx).await)
        }
        methods::Remove::NAME => {
            reply(remove::handle(ctx, parse::<methods::Remove>(params)?).await)
        }
        methods::Gc::NAME => reply(gc::handle(ctx, parse::<methods::Gc>(params)?).await),
        methods::GcLog::NAME => reply(gc_log::handle(ctx, parse::<methods::GcLog>(params)?).await),
        methods::Salvaged::NAME => {
            parse::<methods::Salvaged>(params)?;
            reply(salvaged::handle(ctx).await)
        }
        methods::Restore::NAME => {
            reply(restore::handle(ctx, parse::<methods::Restore>(params)?).await)
        }
        methods::SessionCreate::NAME => {
            reply(session_create::handle(ctx, parse::<methods::SessionCreate>(params)?).await)
        }
        methods::SessionList::NAME => {
            parse::<methods::SessionList>(params)?;
            reply(session_list::handle(ctx).await)
        }
        methods::SessionShow::NAME => {
            reply(session_show::handle(ctx, parse::<methods::SessionShow>(params)?).await)
        }
        methods::StateUpdate::NAME => {
            reply(state_update::handle(ctx, parse::<methods::StateUpdate>(params)?).await)
        }
        methods::StateGet::NAME => {
            reply(state_get::handle(ctx, parse::<methods::StateGet>(params)?).await)
        }
        methods::StateHistory::NAME => {
            reply(state_history::handle(ctx, parse::<methods::StateHistory>(params)?).await)
        }
        methods::StateFork::NAME => {
            reply(state_fork::handle(ctx, parse::<methods::StateFork>(params)?).await)
        }
        methods::StateCompact::NAME => {
            reply(state_compact::handle(ctx, parse::<methods::StateCompact>(params)?).await)
        }
        methods::DaemonStatus::NAME => {
            parse::<methods::DaemonStatus>(params)?;
            reply(daemon_status::handle(ctx).await)
        }
        methods::DaemonStop::NAME => {
            parse::<methods::DaemonStop>(params)?;
            reply(daemon_stop::handle(ctx).await)
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

/// Who is asking about which session. A token makes the caller that agent, and an agent
/// may only name its own session; without a token the caller is the user and names one.
pub struct Caller {
    pub session: String,
    pub writer: String,
}

pub async fn caller(
    ctx: &Ctx,
    session: Option<&str>,
    token: Option<&str>,
) -> Result<Caller, crate::Error> {
    match token {
        Some(token) => {
            let (agent, own) = ctx.core.by_token(token).await?;
            if let Some(named) = session.filter(|named| *named != own) {
                return Err(crate::Error::Refused(format!(
                    "agent {agent} may use only its own session `{own}`, not `{named}`"
                )));
            }
            Ok(Caller {
                session: own,
                writer: agent,
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
        }),
    }
}

fn reply<T: Serialize>(result: Result<T, crate::Error>) -> Result<Value, RpcError> {
    let value = result.map_err(RpcError::from)?;
    serde_json::to_value(value)
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, format!("cannot encode result: {e}")))
}

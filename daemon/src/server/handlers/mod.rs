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
pub mod spawn;
pub mod wait;

use super::Ctx;
use grove_proto::methods::{self, Method};
use grove_proto::{codes, RpcError};
use serde::Serialize;
use serde_json::Value;

pub async fn dispatch(ctx: &Ctx, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
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

fn reply<T: Serialize>(result: Result<T, crate::Error>) -> Result<Value, RpcError> {
    let value = result.map_err(RpcError::from)?;
    serde_json::to_value(value)
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, format!("cannot encode result: {e}")))
}

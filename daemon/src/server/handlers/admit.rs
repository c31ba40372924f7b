//! Admits a call by what its method's type says about its callers
//! (`grove_proto::methods::Callers`): the dispatch never chooses authority by hand. Each
//! function asserts at compile time that it fits the method it is used for, so a
//! session-scoped method cannot be admitted as an open one, nor the other way round.

use super::super::connection::Conn;
use super::super::Ctx;
use super::{authority, Caller};
use grove_proto::methods::{self as m, Callers, Method};
use grove_proto::{codes, RpcError};
use serde_json::Value;

/// The params of a call to `M`, a method for anyone or for the user only; to an agent
/// calling a method of the user's it answers what the agent may not do.
pub fn admit<M: Method>(conn: &Conn, params: Option<Value>) -> Result<M::Params, RpcError> {
    const {
        assert!(
            !matches!(M::CALLERS, Callers::OwnSession),
            "a session-scoped method is admitted with admit_on_session"
        )
    };
    let params = parse::<M>(params)?;
    if let Callers::User(what) = M::CALLERS {
        authority::user_only(conn, what)?;
    }
    Ok(params)
}

/// The params of a call to `M`, a method on a session's state, and who acts on which
/// session: an agent on its own only, the user on the one it names.
pub async fn admit_on_session<M: Method>(
    ctx: &Ctx,
    conn: &Conn,
    params: Option<Value>,
) -> Result<(Caller, M::Params), RpcError>
where
    M::Params: SessionScoped,
{
    const {
        assert!(
            matches!(M::CALLERS, Callers::OwnSession),
            "only a session-scoped method is admitted with admit_on_session"
        )
    };
    let params = parse::<M>(params)?;
    Ok((caller(ctx, conn, &params).await?, params))
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
async fn caller(
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
                tree: Some(agent.root),
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
            tree: None,
        }),
    }
}

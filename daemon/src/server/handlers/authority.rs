//! Who may do what. The user (any connection from outside every agent) may do
//! everything. A connection from inside an agent's process tree is that agent, whatever
//! it sends: it may read and write its own session's state, report its result, spawn
//! children into its own session, and list, wait for, read and kill the agents it
//! spawned; nothing else. Agents it may not touch do not exist for it: the core
//! resolves its ids among its own only.

use super::super::connection::Conn;
use super::super::Ctx;
use crate::core::Identity;
use crate::Error;
use grove_proto::types::AgentRecord;

/// The agent a request acts as: the connection's (from process ancestry), else the
/// token's. Both present and different is refused.
pub async fn acting_agent(
    ctx: &Ctx,
    conn: &Conn,
    token: Option<&str>,
) -> Result<Option<Identity>, Error> {
    let from_token = match token {
        Some(token) => Some(ctx.core.by_token(token).await?),
        None => None,
    };
    match (conn.agent(), from_token) {
        (Some(tree), Some(token)) if tree.id != token.id => Err(Error::Refused(format!(
            "this connection comes from agent {} but presents the token of agent {}",
            tree.id, token.id
        ))),
        (Some(tree), _) => Ok(Some(tree.clone())),
        (None, token) => Ok(token),
    }
}

/// Refuses agents: `what` is for the user only.
pub fn user_only(conn: &Conn, what: &str) -> Result<(), Error> {
    match conn.agent() {
        Some(agent) => Err(Error::Refused(format!(
            "agent {} may not {what}; only the user can",
            agent.id
        ))),
        None => Ok(()),
    }
}

/// The agent `prefix` names, as the caller may see it: the user sees every agent; an
/// agent sees itself and the agents it spawned, and any other id is answered exactly
/// like an id that does not exist.
pub async fn visible(ctx: &Ctx, conn: &Conn, prefix: &str) -> Result<AgentRecord, Error> {
    ctx.core
        .get_for(prefix, conn.agent().map(|me| me.id.as_str()))
        .await
}

/// The agent `prefix` names, for acting on its terminal: an agent reaches only the
/// agents it spawned (directly or not), never its own terminal, which would let it
/// answer the very questions it was stopped on; the user reaches every agent.
pub async fn descendant(ctx: &Ctx, conn: &Conn, prefix: &str) -> Result<AgentRecord, Error> {
    let record = visible(ctx, conn, prefix).await?;
    match conn.agent() {
        Some(me) if me.id == record.id => Err(Error::Refused(format!(
            "agent {} may not type into or read its own terminal; only the agents it \
             spawned, or the user",
            me.id
        ))),
        _ => Ok(record),
    }
}

//! Who may do what. The user (any connection from outside every agent) may do
//! everything. A connection from inside an agent's process tree is that agent, whatever
//! it sends: it may read and write its own session's state, report its result, spawn
//! children, and list, wait for, read and kill the agents it spawned; nothing else.

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

/// True when `record` is `me` or was spawned (directly or not) by `me`.
async fn is_mine(ctx: &Ctx, me: &Identity, record: &AgentRecord) -> bool {
    let mut current = record.clone();
    for _ in 0..64 {
        if current.id == me.id {
            return true;
        }
        match &current.parent {
            Some(parent) => match ctx.core.get(parent).await {
                Ok(parent) => current = parent,
                Err(_) => return false,
            },
            None => return false,
        }
    }
    false
}

/// Refuses an agent acting on an agent it did not spawn.
pub async fn may_touch(
    ctx: &Ctx,
    conn: &Conn,
    record: &AgentRecord,
    what: &str,
) -> Result<(), Error> {
    match conn.agent() {
        Some(me) if !is_mine(ctx, me, record).await => Err(Error::Refused(format!(
            "agent {} may not {what} agent {}: it may act only on agents it spawned",
            me.id, record.id
        ))),
        _ => Ok(()),
    }
}

use super::super::connection::Conn;
use super::super::Ctx;
use crate::Error;
use grove_proto::methods::SessionShowParams;
use grove_proto::state::{SessionAgent, SessionInfo};
use grove_proto::types::AgentRecord;

pub async fn handle(
    ctx: &Ctx,
    conn: &Conn,
    params: SessionShowParams,
) -> Result<SessionInfo, Error> {
    if let Some(me) = conn.agent().filter(|me| me.session != params.name) {
        return Err(Error::Refused(format!(
            "agent {} may read only its own session `{}`",
            me.id, me.session
        )));
    }
    let mut info = ctx.state.info(&params.name).await?;
    info.agents = ctx.core.session_agents(&params.name).await?;
    Ok(info)
}

pub fn attach_agents(info: &mut SessionInfo, agents: &[AgentRecord]) {
    let mut members: Vec<&AgentRecord> = agents.iter().filter(|a| a.session == info.name).collect();
    members.sort_by_key(|a| a.created_at_ms);
    info.agents = members
        .into_iter()
        .map(|a| SessionAgent {
            id: a.id.clone(),
            status: a.status_text(),
        })
        .collect();
}

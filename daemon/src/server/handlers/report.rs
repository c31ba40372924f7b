use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::acting_agent;
use crate::Error;
use grove_proto::methods::ReportParams;
use grove_proto::types::AgentRecord;

/// `agent.report`: the agent's final message for its parent. Inside an agent it is
/// that agent's own report; the user names the agent with `id`.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: ReportParams) -> Result<AgentRecord, Error> {
    let me = acting_agent(ctx, conn, params.token.as_deref()).await?;
    // An agent's report is stored in a record of its tree: counted against the tree
    // (`tree_max_db`) before it is.
    let charged = match &me {
        Some(me) => {
            let bytes = crate::sessions::json_bytes(&params.text);
            ctx.state
                .tree_db()
                .charge_loaded(&me.root, &me.id, bytes)
                .await?;
            Some((me.root.clone(), bytes))
        }
        None => None,
    };
    let reported = report(ctx, me, params).await;
    if let (Err(_), Some((root, bytes))) = (&reported, &charged) {
        ctx.state.tree_db().refund(root, *bytes);
    }
    reported
}

async fn report(
    ctx: &Ctx,
    me: Option<crate::core::Identity>,
    params: ReportParams,
) -> Result<AgentRecord, Error> {
    let target = match (me, &params.id) {
        (Some(me), None) => me.id,
        (Some(me), Some(id)) => ctx.core.get_for(id, Some(&me.id)).await?.id,
        (None, Some(id)) => id.clone(),
        (None, None) => {
            return Err(Error::BadInput(
                "say which agent reports: run `grove report` inside the agent, or pass --id".into(),
            ))
        }
    };
    ctx.core.report(&target, params.text).await
}

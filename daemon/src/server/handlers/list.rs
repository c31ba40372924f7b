use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::{AgentList, ListParams};

const MAX_PAGE: usize = 1_000;
/// Serialized records per answer stay under this, well inside the 1 MiB line cap.
const MAX_PAGE_BYTES: usize = 768 * 1024;

/// Inside an agent, only the agents it spawned. Long lists come in pages: `next` says
/// where the following page starts.
pub async fn handle(ctx: &Ctx, conn: &Conn, params: ListParams) -> Result<AgentList, Error> {
    let agents = visible(ctx, conn, ctx.core.list(params.all).await?).await;
    let start = match &params.after {
        Some(after) => {
            agents.iter().position(|a| &a.id == after).ok_or_else(|| {
                Error::BadInput(format!(
                    "`after` names agent `{after}`, which is not in this list; start again \
                         without `after`"
                ))
            })? + 1
        }
        None => 0,
    };
    let limit = params
        .limit
        .map_or(MAX_PAGE, |l| (l as usize).clamp(1, MAX_PAGE));
    let mut page = Vec::new();
    let mut bytes = 0;
    for agent in agents.iter().skip(start) {
        let size = serde_json::to_vec(agent).map_or(0, |v| v.len());
        if page.len() == limit || (!page.is_empty() && bytes + size > MAX_PAGE_BYTES) {
            break;
        }
        bytes += size;
        page.push(agent.clone());
    }
    let next = (start + page.len() < agents.len())
        .then(|| page.last().map(|a| a.id.clone()))
        .flatten();
    Ok(AgentList { agents: page, next })
}

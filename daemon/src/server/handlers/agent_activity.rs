//! `agent.activity`: an agent says itself that it waits for input or works
//! (`grove status waiting|working`, e.g. from Claude Code's Notification and Stop
//! hooks). Inside an agent it names itself or one of its own; the user names any.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::Error;
use grove_proto::methods::ActivityParams;
use grove_proto::types::AgentRecord;

pub async fn handle(ctx: &Ctx, conn: &Conn, params: ActivityParams) -> Result<AgentRecord, Error> {
    let waiting = match params.activity.as_str() {
        "waiting" => true,
        "working" => false,
        other => {
            return Err(Error::BadInput(format!(
                "activity `{other}` is not one grove knows: say `waiting` or `working`"
            )))
        }
    };
    let id = match (&params.id, conn.agent()) {
        (Some(id), _) => visible(ctx, conn, id).await?.id,
        (None, Some(me)) => me.id.clone(),
        (None, None) => {
            return Err(Error::BadInput(
                "say which agent (`id`): this connection is not from inside an agent".into(),
            ))
        }
    };
    ctx.core.set_activity(&id, waiting).await
}

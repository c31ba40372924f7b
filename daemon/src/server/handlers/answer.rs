//! `agent.answer`: the user, or the asking agent's parent, answers its question. Who
//! may is the core's to say (it knows the asker's parent); an agent sees only itself
//! and its own agents, so another's id is answered as unknown.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::acting_agent;
use crate::Error;
use grove_proto::methods::AnswerParams;
use grove_proto::types::Answered;

pub async fn handle(ctx: &Ctx, conn: &Conn, params: AnswerParams) -> Result<Answered, Error> {
    let me = acting_agent(ctx, conn, params.token.as_deref()).await?;
    ctx.core
        .answer_question(&params.id, me.map(|me| me.id), params.text)
        .await
}

use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{DiscardResult, IdParams};

/// `agent.discard`: delete a finished agent's branch in the repository's lane, keeping
/// its tip under a salvage ref. A change to the user's repository: the user's alone.
pub async fn handle(ctx: &Ctx, params: IdParams) -> Result<DiscardResult, Error> {
    ctx.core.discard(&params.id).await
}

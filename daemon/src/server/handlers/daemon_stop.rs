use super::super::Ctx;
use crate::Error;
use grove_proto::methods::Empty;

/// Stops serving. Running agents are not touched: their shims keep them alive and the
/// next daemon adopts them. The response still goes out: connections flush what their
/// requests answered before they close.
pub async fn handle(ctx: &Ctx) -> Result<Empty, Error> {
    tracing::info!("stop requested by a client");
    let _ = ctx.stop.send(true);
    Ok(Empty {})
}

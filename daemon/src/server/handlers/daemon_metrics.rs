use super::super::Ctx;
use crate::Error;
use grove_proto::methods::MetricsResult;

/// `daemon.metrics`: the same figures as `GET /metrics`, and the service levels. The
/// user's only: the counts span every agent, and an agent sees only its own.
pub async fn handle(ctx: &Ctx) -> Result<MetricsResult, Error> {
    Ok(MetricsResult {
        metrics: crate::server::metrics::gather(ctx).await,
        slos: crate::server::metrics::slo::evaluate(ctx).await,
    })
}

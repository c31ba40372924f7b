use super::super::Ctx;
use crate::Error;
use grove_proto::methods::DaemonStatusResult;

pub async fn handle(ctx: &Ctx) -> Result<DaemonStatusResult, Error> {
    let dirs = &ctx.config.dirs;
    let core = ctx.core.status().await;
    let scanning = ctx.janitor.scanning();
    let metrics = crate::metrics::record::get();
    Ok(DaemonStatusResult {
        pid: std::process::id(),
        daemon_version: env!("CARGO_PKG_VERSION").into(),
        protocol: ctx.config.protocol_version,
        started_at_ms: ctx.started_at_ms,
        socket: dirs.socket.clone(),
        state_dir: dirs.state_dir.clone(),
        worktree_root: dirs.worktree_root.clone(),
        agents_live: core.agents_live,
        pool: core.pool,
        recovering: core.recovering > 0 || scanning,
        recovery_pending: core.recovering,
        last_prune_ms: metrics.last_prune.get(),
        next_prune_ms: metrics.next_prune.get(),
        last_session_gc_ms: metrics.last_session_gc.get(),
        next_session_gc_ms: metrics.next_session_gc.get(),
        settings: crate::config::settings_text(&ctx.config),
    })
}

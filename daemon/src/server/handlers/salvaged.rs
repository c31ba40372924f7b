use super::super::Ctx;
use crate::git::refs;
use crate::git::target::resolve_repo;
use crate::Error;
use grove_proto::methods::SalvagedResult;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// `salvage.list`: salvage refs in every repository grove has worked in.
pub async fn handle(ctx: &Ctx) -> Result<SalvagedResult, Error> {
    let repos: BTreeSet<PathBuf> = ctx
        .core
        .snapshot()
        .await?
        .into_iter()
        .map(|r| r.repo)
        .collect();
    let mut found = Vec::new();
    for repo in repos {
        let Ok(Ok(target)) = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await else {
            continue;
        };
        found.extend(ctx.lanes.run(&target, |lane| refs::list(lane)).await?);
    }
    Ok(SalvagedResult { refs: found })
}

//! `agent.spawn`: check the request, resolve repository and base, register the agent,
//! create its worktree and start its shim. Any failure leaves nothing behind.

use super::super::Ctx;
use crate::core::NewAgent;
use crate::git::target::resolve_repo;
use crate::git::worktree;
use crate::supervisor::environment::{agent_environment, AgentIdentity};
use crate::supervisor::launch::launch;
use crate::Error;
use grove_agent_shim::{ShimSpec, EXIT_RECORD_FILE};
use grove_proto::methods::SpawnParams;
use grove_proto::types::AgentRecord;

pub async fn handle(ctx: &Ctx, params: SpawnParams) -> Result<AgentRecord, Error> {
    validate(&params)?;
    let repo_path = params.repo.clone();
    let target = tokio::task::spawn_blocking(move || resolve_repo(&repo_path))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    let wanted_base = params.base.clone();
    let caller_git_dir = target.caller_git_dir.clone();
    let (base_name, base_commit) = ctx
        .lanes
        .run(&target, move |lane| {
            worktree::resolve_base(lane, wanted_base.as_deref(), &caller_git_dir)
                .map(|b| (b.name, b.commit))
        })
        .await?;
    let user_env: Vec<(String, String)> = params
        .env
        .iter()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect();
    let (record, token) = ctx
        .core
        .register(NewAgent {
            params,
            target: target.clone(),
            base_name,
            base_commit: base_commit.to_string(),
        })
        .await?;
    if let Err(e) = create_worktree(ctx, &target, &record, base_commit).await {
        ctx.core.discard(&record.id).await;
        return Err(e);
    }
    let pid = match start_shim(ctx, &record, &token, user_env).await {
        Ok(pid) => pid,
        Err(e) => {
            let (path, branch) = (record.worktree.clone(), record.branch.clone());
            let _ = ctx
                .lanes
                .run(&target, move |lane| {
                    worktree::rollback(&lane.repo, &path, &branch);
                    Ok(())
                })
                .await;
            ctx.core.discard(&record.id).await;
            return Err(e);
        }
    };
    ctx.core.started(&record.id, pid).await
}

async fn create_worktree(
    ctx: &Ctx,
    target: &crate::git::target::RepoTarget,
    record: &AgentRecord,
    base: git2::Oid,
) -> Result<(), Error> {
    let path = record.worktree.clone();
    let branch = record.branch.clone();
    let reason = format!("grove agent {} is using this worktree", record.id);
    let workers = ctx.config.checkout_workers;
    ctx.lanes
        .run(target, move |lane| {
            worktree::create(lane, &path, &branch, base, &reason, workers)
        })
        .await
}

async fn start_shim(
    ctx: &Ctx,
    record: &AgentRecord,
    token: &str,
    user_env: Vec<(String, String)>,
) -> Result<u32, Error> {
    let socket = ctx.config.dirs.socket.display().to_string();
    let worktree = record.worktree.display().to_string();
    let identity = AgentIdentity {
        agent_id: &record.id,
        session: &record.session,
        socket: &socket,
        token,
        worktree: &worktree,
        base: &record.base_commit,
    };
    let spec = ShimSpec {
        agent_id: record.id.clone(),
        argv: record.argv.clone(),
        env: agent_environment(&identity, &user_env),
        limits: record.limits.clone(),
        timeout_ms: record.timeout_ms,
        grace_ms: ctx.config.kill_grace.as_millis() as u64,
        exit_record: ctx.config.dirs.agent_dir(&record.id).join(EXIT_RECORD_FILE),
    };
    let exe = ctx.exe.clone();
    let cwd = record.worktree.clone();
    let log = record.log_path.clone();
    tokio::task::spawn_blocking(move || launch(&exe, &spec, &cwd, &log))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Internal(format!("cannot start the agent's shim: {e}")))
}

fn validate(params: &SpawnParams) -> Result<(), Error> {
    let bad = |message: String| Err(Error::BadInput(message));
    match params.argv.first() {
        None => {
            return bad("no command given: put the agent's command after `--`, \
                 e.g. `grove spawn -- make test`"
                .into())
        }
        Some(program) if program.is_empty() => {
            return bad("the command is an empty string; give a program to run".into())
        }
        _ => {}
    }
    if let Some(i) = params.argv.iter().position(|a| a.contains('\0')) {
        return bad(format!("argument {i} of the command contains a NUL byte"));
    }
    if !params.repo.is_absolute() {
        return bad(format!(
            "repo path `{}` must be absolute",
            params.repo.display()
        ));
    }
    if let Some(name) = &params.name {
        validate_name(name)?;
    }
    for var in &params.env {
        if var.name.is_empty() || var.name.contains(['=', '\0']) {
            return bad(format!(
                "environment variable name `{}` is not valid: give NAME=VALUE with a \
                 non-empty NAME without `=`",
                var.name
            ));
        }
        if var.value.contains('\0') {
            return bad(format!("the value of {} contains a NUL byte", var.name));
        }
    }
    if params.timeout_ms == Some(0) {
        return bad("timeout must be longer than zero".into());
    }
    Ok(())
}

/// A name becomes part of the branch `grove/<name>-<id>`, so it must be one valid
/// ref component.
fn validate_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && !name.contains('/')
        && git2::Reference::is_valid_name(&format!("refs/heads/grove/{name}-00000000"));
    if valid {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "name `{name}` cannot be part of a branch name: use letters, digits, `-`, `_` \
             or `.`, without `/`, spaces, `..` or a leading `.`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn names_must_be_one_ref_component() {
        for good in ["fix-tests", "a", "feature_2", "v1.2"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "has space",
            "..",
            ".hidden",
            "x..y",
            "a~b",
            "a:b",
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}

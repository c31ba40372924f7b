use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::git::{git_command, hardened_git};
use crate::Error;
use grove_proto::methods::{DiffParams, DiffResult};
use grove_proto::types::{AgentRecord, AgentStatus};
use std::path::{Path, PathBuf};

/// Most diff text returned in one answer (the line cap is 1 MiB).
const MAX_DIFF: usize = 768 * 1024;

/// `agent.diff`: what the agent did against the commit it started from, as git prints
/// it (no colour): for a finished agent `git diff <base>...<branch>`; for a running one
/// its worktree as it is now (commits, staged, unstaged and untracked files).
pub async fn handle(ctx: &Ctx, conn: &Conn, params: DiffParams) -> Result<DiffResult, Error> {
    let record = visible(ctx, conn, &params.id).await?;
    if let Some(bad) = params
        .paths
        .iter()
        .find(|p| p.contains('\0') || p.starts_with('-'))
    {
        return Err(Error::BadInput(format!("`{bad}` is not a path")));
    }
    let mut diff = String::new();
    if let Some(worktree) = live_worktree(&record) {
        let (base, stat, paths) = (
            record.base_commit.clone(),
            params.stat,
            params.paths.clone(),
        );
        let scratch = scratch_index(&ctx.config.dirs.agent_dir(&record.id));
        diff = tokio::task::spawn_blocking(move || {
            let diff = worktree_diff(&worktree, &base, stat, &paths, &scratch);
            let _ = std::fs::remove_file(&scratch);
            diff
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        cap(&mut diff);
    } else if record.branch_exists {
        let (repo, range) = (
            record.repo.clone(),
            format!("{}...{}", record.base_commit, record.branch),
        );
        let (stat, paths) = (params.stat, params.paths.clone());
        // The CLI, not git2: the output must be exactly what `git diff` prints.
        let output = tokio::task::spawn_blocking(move || {
            let mut git = git_command();
            git.arg("-C")
                .arg(&repo)
                .args(["diff", "--no-color", "--no-ext-diff"]);
            if stat {
                git.arg("--stat");
            }
            git.arg(&range).arg("--").args(&paths);
            git.output()
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Git(format!("cannot run git diff: {e}")))?;
        if !output.status.success() {
            return Err(Error::Git(format!(
                "git diff failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        diff = String::from_utf8_lossy(&output.stdout).into_owned();
        cap(&mut diff);
    }
    Ok(DiffResult {
        id: record.id,
        branch: record.branch,
        base_commit: record.base_commit,
        diff,
    })
}

fn cap(diff: &mut String) {
    if diff.len() > MAX_DIFF {
        let mut cut = MAX_DIFF;
        while !diff.is_char_boundary(cut) {
            cut -= 1;
        }
        diff.truncate(cut);
        diff.push_str("\n[grove: diff cut at 768 KiB; run `git diff` for all of it]\n");
    }
}

/// The worktree of an agent whose work is still in it. Not for a jailed agent: its
/// repository, config included, is the agent's to write, and `git add` would run the
/// filters such a config names outside the jail; its committed branch is shown instead.
fn live_worktree(record: &AgentRecord) -> Option<PathBuf> {
    let live = record.status.is_running() || record.status == AgentStatus::Exited;
    (live && !record.jail && record.worktree.is_dir()).then(|| record.worktree.clone())
}

/// The worktree's content against `base`, read without touching the agent's index: a
/// copy of it (so that unchanged files are not hashed again) takes in every change and
/// untracked file, and is compared with the base.
fn worktree_diff(
    worktree: &Path,
    base: &str,
    stat: bool,
    paths: &[String],
    scratch: &Path,
) -> Result<String, Error> {
    let run = |args: &[&str], index: Option<&Path>| -> Result<Vec<u8>, Error> {
        let mut git = hardened_git();
        git.arg("-C").arg(worktree).args(args);
        if let Some(index) = index {
            git.env("GIT_INDEX_FILE", index);
        }
        let out = git
            .output()
            .map_err(|e| Error::Git(format!("cannot run git: {e}")))?;
        if !out.status.success() {
            return Err(Error::Git(format!(
                "git {} in {} failed: {}",
                args.first().copied().unwrap_or_default(),
                worktree.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(out.stdout)
    };
    let index = run(
        &["rev-parse", "--path-format=absolute", "--git-path", "index"],
        None,
    )?;
    let index = PathBuf::from(String::from_utf8_lossy(&index).trim());
    match std::fs::copy(&index, scratch) {
        Ok(_) => {}
        // No index yet: git builds one.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::Internal(format!(
                "cannot copy {}: {e}",
                index.display()
            )))
        }
    }
    run(&["add", "-A", "--", "."], Some(scratch))?;
    let mut args = vec![
        "diff",
        "--cached",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
    ];
    if stat {
        args.push("--stat");
    }
    args.extend([base, "--"]);
    args.extend(paths.iter().map(String::as_str));
    let out = run(&args, Some(scratch))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A scratch index of its own for each call, in the agent's private state directory.
fn scratch_index(agent_dir: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    agent_dir.join(format!(
        "live-diff-{}-{}.index",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::visible;
use crate::git::git_command;
use crate::Error;
use grove_proto::methods::{DiffParams, DiffResult};

/// Most diff text returned in one answer (the line cap is 1 MiB).
const MAX_DIFF: usize = 768 * 1024;

/// `agent.diff`: `git diff <base>...<branch>`, as git prints it (no colour).
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
    if record.branch_exists {
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
        if diff.len() > MAX_DIFF {
            let mut cut = MAX_DIFF;
            while !diff.is_char_boundary(cut) {
                cut -= 1;
            }
            diff.truncate(cut);
            diff.push_str("\n[grove: diff cut at 768 KiB; run `git diff` for all of it]\n");
        }
    }
    Ok(DiffResult {
        id: record.id,
        branch: record.branch,
        base_commit: record.base_commit,
        diff,
    })
}

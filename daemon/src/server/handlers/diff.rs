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
        let (base, stat, paths, placed) = (
            record.base_commit.clone(),
            params.stat,
            params.paths.clone(),
            record.placed.clone(),
        );
        let scratch = ctx.config.dirs.agent_dir(&record.id).join(LIVE_INDEX);
        let entry = ctx.live_diffs.get(&record.id);
        diff = tokio::task::spawn_blocking(move || {
            // One diff of an agent at a time: they share its scratch index.
            let mut cached = entry.lock().unwrap_or_else(|e| e.into_inner());
            let live = Live {
                worktree: &worktree,
                placed: &placed,
                scratch: &scratch,
            };
            worktree_diff(&live, &base, stat, &paths, &mut cached)
        })
        .await??;
        cap(&mut diff);
    } else if record.branch_exists {
        forget_live(ctx, &record.id);
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
        .await?
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

/// The scratch index of an agent's live diffs, in its private state directory: kept
/// between diffs, so that `git add -A` finds unchanged files by their stat data and
/// rewrites the index only when the worktree changed.
const LIVE_INDEX: &str = crate::git::LIVE_DIFF_INDEX;

/// What a live diff depends on besides the worktree: the base and the request.
#[derive(Clone, PartialEq, Eq)]
struct Request {
    base: String,
    stat: bool,
    paths: Vec<String>,
}

/// The scratch index as `git add -A` left it. git writes an index through a new file
/// renamed into place, and leaves it alone when nothing changed, so an unchanged
/// identity means an unchanged worktree (as git sees it: content, modes, untracked).
#[derive(Clone, Copy, PartialEq, Eq)]
struct IndexId {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl IndexId {
    fn of(path: &Path) -> Option<IndexId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(IndexId {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
}

/// The last live diff of one agent.
#[derive(Default)]
pub struct LiveCache {
    last: Option<(IndexId, Request, String)>,
}

/// The agent's work is on its branch now: its live cache and scratch index go.
fn forget_live(ctx: &Ctx, id: &str) {
    ctx.live_diffs.forget(id);
    let _ = std::fs::remove_file(ctx.config.dirs.agent_dir(id).join(LIVE_INDEX));
}

/// A running agent's worktree as its live diff reads it.
struct Live<'a> {
    worktree: &'a Path,
    /// What grove placed there (setup's copies and links, the preset CLI's own files):
    /// never its work, so never in its diff, as salvage never commits them.
    placed: &'a [String],
    scratch: &'a Path,
}

/// The worktree's content against `base`, read without touching the agent's index: a
/// scratch index (first a copy of the agent's, so that unchanged files are not hashed)
/// takes in every change and untracked file but what grove placed, and is compared with
/// the base. When `git add -A` left the scratch index as the last diff found it, that
/// diff is still the answer.
fn worktree_diff(
    live: &Live<'_>,
    base: &str,
    stat: bool,
    paths: &[String],
    cache: &mut LiveCache,
) -> Result<String, Error> {
    let (worktree, scratch) = (live.worktree, live.scratch);
    let run = |args: &[&str], index: Option<&Path>| -> Result<Vec<u8>, Error> {
        let mut git = hardened_git();
        git.arg("-C").arg(worktree);
        crate::git::output_on_index(git, index, worktree, args)
    };
    if !scratch.exists() {
        seed_scratch(&run, scratch)?;
    }
    let left_out: Vec<String> = live
        .placed
        .iter()
        .map(|path| format!(":(exclude,literal){path}"))
        .collect();
    let mut add = vec!["add", "-A", "--", "."];
    add.extend(left_out.iter().map(String::as_str));
    if let Err(e) = run(&add, Some(scratch)) {
        // A scratch index a crash left half-written costs one fresh copy.
        let _ = std::fs::remove_file(scratch);
        cache.last = None;
        return Err(e);
    }
    let request = Request {
        base: base.to_string(),
        stat,
        paths: paths.to_vec(),
    };
    let id = IndexId::of(scratch);
    if let (Some(id), Some((last_id, last_request, text))) = (id, &cache.last) {
        if *last_id == id && *last_request == request {
            return Ok(text.clone());
        }
    }
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
    let text = String::from_utf8_lossy(&out).into_owned();
    cache.last = id.map(|id| (id, request, text.clone()));
    Ok(text)
}

/// The scratch index starts as a copy of the agent's own (none yet: git builds one).
fn seed_scratch(
    run: &impl Fn(&[&str], Option<&Path>) -> Result<Vec<u8>, Error>,
    scratch: &Path,
) -> Result<(), Error> {
    let index = run(
        &["rev-parse", "--path-format=absolute", "--git-path", "index"],
        None,
    )?;
    let index = PathBuf::from(String::from_utf8_lossy(&index).trim());
    match std::fs::copy(&index, scratch) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("copy", &index)(e)),
    }
}

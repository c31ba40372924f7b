//! The `git` command line, for reviewing and merging agents' branches.
//!
//! A merge, rebase or commit, a status and a merge preview shell out to `git`: they must
//! run the user's hooks, merge drivers, rerere, excludes, fsmonitor and
//! `merge.*`/`commit.*`/`status.*` config exactly as if the user had typed the command,
//! and so does every change to the user's branches. Plain reads of refs, commits and
//! trees (a tip, a merge base, which paths differ) have one answer whatever the config,
//! and libgit2 gives it in process, as it writes grove's own merge record: each `git`
//! costs a process start, and a `grove merge` asked dozens. A repository libgit2
//! cannot open (an extension it does not know, such as reftable) goes to the command
//! line for everything.

use anyhow::{bail, Context, Result};
use grove_proto::types::AgentRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// `git -C dir`, with output captured.
#[derive(Debug, Clone)]
pub struct Git {
    pub dir: PathBuf,
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git { dir: dir.into() }
    }

    /// Captured output, whatever the exit status.
    pub fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Output> {
        grove_proto::git::command()
            .arg("-C")
            .arg(&self.dir)
            .args(args)
            // Nobody is there to type a commit message or answer a prompt.
            .env("GIT_EDITOR", "true")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running git in {}", self.dir.display()))
    }

    /// Stdout of a command that must succeed.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String> {
        let out = self.output(args)?;
        if !out.status.success() {
            bail!(
                "`git {}` in {} failed: {}",
                show_args(args),
                self.dir.display(),
                said(&out)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Exit status 0 is true, 1 is false, anything else an error.
    fn test<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<bool> {
        let out = self.output(args)?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => bail!(
                "`git {}` in {} failed: {}",
                show_args(args),
                self.dir.display(),
                said(&out)
            ),
        }
    }

    /// The commit `rev` names, if it names one.
    pub fn commit(&self, rev: &str) -> Result<Option<String>> {
        if let Some(found) = self.in_process(|r| Ok(peel_commit(r, rev).ok().map(hex))) {
            return Ok(found);
        }
        let out = self.output(&[
            "rev-parse",
            "--verify",
            "-q",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    pub fn branch_tip(&self, branch: &str) -> Result<Option<String>> {
        self.commit(&format!("refs/heads/{branch}"))
    }

    /// The agent tip grove last merged into `target` (squash and rebase included, which
    /// git cannot see), if it merged one.
    pub fn recorded_merge(&self, target: &str, id: &str) -> Result<Option<String>> {
        self.commit(&merge_record(target, id))
    }

    /// Remembers that grove merged `tip` of agent `id` into `target`.
    pub fn record_merge(&self, target: &str, id: &str, tip: &str) -> Result<()> {
        let message = format!("grove merge {id} into {target}");
        // grove's own bookkeeping, written the way the daemon writes its salvage refs:
        // libgit2 takes git's lock on the ref and keeps a reflog where
        // `core.logAllRefUpdates` asks for one; the command line says why it cannot.
        let written = self.in_process(|r| {
            let tip = git2::Oid::from_str(tip)?;
            r.reference(&merge_record(target, id), tip, true, &message)
                .map(drop)
        });
        if written.is_some() {
            return Ok(());
        }
        self.run(&["update-ref", "-m", &message, &merge_record(target, id), tip])
            .map(|_| ())
    }

    pub fn head(&self) -> Result<String> {
        // An unborn HEAD is an error: the command line says what git says about it.
        if let Some(Some(head)) = self.in_process(|r| Ok(peel_commit(r, "HEAD").ok().map(hex))) {
            return Ok(head);
        }
        Ok(self.run(&["rev-parse", "HEAD"])?.trim().to_string())
    }

    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> Result<bool> {
        let in_process = self.in_process(|r| {
            let (a, b) = (peel_commit(r, ancestor)?.id(), peel_commit(r, of)?.id());
            Ok(a == b || r.graph_descendant_of(b, a)?)
        });
        if let Some(answer) = in_process {
            return Ok(answer);
        }
        self.test(&["merge-base", "--is-ancestor", ancestor, of])
    }

    pub fn merge_base(&self, a: &str, b: &str) -> Result<Option<String>> {
        let in_process = self.in_process(|r| {
            let (a, b) = (peel_commit(r, a)?.id(), peel_commit(r, b)?.id());
            match r.merge_base(a, b) {
                Ok(base) => Ok(Some(base.to_string())),
                Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        });
        if let Some(answer) = in_process {
            return Ok(answer);
        }
        let out = self.output(&["merge-base", a, b])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// (ahead, behind) of `branch` against `base`.
    pub fn ahead_behind(&self, base: &str, branch: &str) -> Result<(u64, u64)> {
        let out = self.run(&[
            "rev-list",
            "--left-right",
            "--count",
            &format!("{base}...{branch}"),
        ])?;
        let mut counts = out.split_whitespace().map(str::parse::<u64>);
        match (counts.next(), counts.next()) {
            (Some(Ok(behind)), Some(Ok(ahead))) => Ok((ahead, behind)),
            _ => bail!("unexpected output of git rev-list --count: {out:?}"),
        }
    }

    /// Every entry of `git status`: changed tracked files, untracked files and directories
    /// (a directory as `dir/`), and ignored ones the same way.
    pub fn status_entries(&self) -> Result<Vec<StatusEntry>> {
        let out = self.run(&[
            "status",
            "--porcelain=v2",
            "-z",
            "--ignored",
            "--untracked-files=normal",
            "--no-renames",
        ])?;
        Ok(parse_status(&out))
    }

    /// Paths that differ between two trees-ish, by name, renames as two paths.
    pub fn changed_paths(&self, from: &str, to: &str) -> Result<Vec<String>> {
        if let Some(paths) = self.in_process(|r| Ok(diff_paths(&tree_diff(r, from, to, None)?))) {
            return Ok(paths);
        }
        Ok(split_z(&self.run(&[
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            from,
            to,
        ])?))
    }

    /// The tree git's merge of `ours` and `theirs` gives, conflict markers and all;
    /// None when git will not merge the two at all. `scratch`, an empty directory,
    /// stands in for the work tree and index: a merge driver of the user's config runs
    /// here too, and must not write into a checkout before the real merge.
    pub fn merge_tree(&self, ours: &str, theirs: &str, scratch: &Path) -> Result<Option<String>> {
        let common = match self.in_process(|r| Ok(r.commondir().to_path_buf())) {
            Some(common) => common,
            None => {
                let common =
                    self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
                PathBuf::from(common.trim_end_matches('\n'))
            }
        };
        let out = grove_proto::git::command()
            .arg("--git-dir")
            .arg(&common)
            .arg("--work-tree")
            .arg(scratch)
            .args([
                "merge-tree",
                "--write-tree",
                "--no-messages",
                "-z",
                ours,
                theirs,
            ])
            .current_dir(scratch)
            .env("GIT_INDEX_FILE", scratch.join("index"))
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running git merge-tree for {}", self.dir.display()))?;
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let tree = text.split(['\0', '\n']).next().unwrap_or_default().trim();
        Ok((!tree.is_empty()).then(|| tree.to_string()))
    }

    /// What a merge of `theirs` into `ours` writes when it can only be the union of the
    /// two sides' changes: they changed disjoint paths, neither side deleted one (so
    /// there is no rename for git to follow, of a file or a directory), and none is a
    /// file where the other side has a directory. Then git merges no content, runs no
    /// merge driver, and writes exactly what `theirs` changed. None when it may be more
    /// than that, or when libgit2 cannot say.
    pub fn union_merge_writes(&self, ours: &str, theirs: &str) -> Option<BTreeSet<String>> {
        self.in_process(|r| {
            // On a case-insensitive checkout, distinct names may be one file.
            if r.config()?.get_bool("core.ignorecase").unwrap_or(false) {
                return Ok(None);
            }
            let (o, t) = (peel_commit(r, ours)?.id(), peel_commit(r, theirs)?.id());
            let fork = r.merge_base(o, t)?.to_string();
            let side = |tip: git2::Oid| -> Result<Option<BTreeSet<String>>, git2::Error> {
                let diff = tree_diff(r, &fork, &tip.to_string(), None)?;
                let plain = diff
                    .deltas()
                    .all(|d| matches!(d.status(), git2::Delta::Added | git2::Delta::Modified));
                Ok(plain.then(|| diff_paths(&diff).into_iter().collect()))
            };
            let (Some(mine), Some(yours)) = (side(o)?, side(t)?) else {
                return Ok(None);
            };
            Ok((!clash(&mine, &yours) && !clash(&yours, &mine)).then_some(yours))
        })
        .flatten()
    }

    /// The branch checked out here, None on a detached HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let in_process = self.in_process(|r| {
            let head = r.find_reference("HEAD")?;
            Ok(match head.symbolic_target() {
                None => Some(None),
                Some(name) => name
                    .strip_prefix("refs/heads/")
                    .map(|b| Some(b.to_string())),
            })
        });
        // A HEAD naming something other than a branch is left to git to shorten.
        if let Some(Some(answer)) = in_process {
            return Ok(answer);
        }
        let out = self.output(&["symbolic-ref", "-q", "--short", "HEAD"])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    pub fn worktrees(&self) -> Result<Vec<Worktree>> {
        if let Some(Some(all)) = self.in_process(worktrees_of) {
            return Ok(all);
        }
        Ok(parse_worktrees(&self.run(&[
            "worktree",
            "list",
            "--porcelain",
            "-z",
        ])?))
    }

    /// Files in conflict in this checkout.
    pub fn unmerged_files(&self) -> Result<Vec<String>> {
        Ok(split_z(&self.run(&[
            "diff",
            "--name-only",
            "-z",
            "--diff-filter=U",
        ])?))
    }

    /// What changed from `from` to `to`: files, and hunks in `from`'s line numbers.
    pub fn changes(&self, from: &str, to: &str) -> Result<Changes> {
        if let Some(Some(changes)) = self.in_process(|r| changes_of(r, from, to)) {
            return Ok(changes);
        }
        // No renames: a renamed file counts under both names, so that overlaps match by
        // path whatever rename detection would have paired.
        let files = split_z(&self.run(&["diff", "--name-only", "-z", "--no-renames", from, to])?);
        let patch = self.run(&[
            "diff",
            "-U0",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            from,
            to,
        ])?;
        Ok(Changes {
            files,
            hunks: parse_hunks(&patch),
        })
    }

    /// (files changed, insertions, deletions) from `from` to `to`.
    pub fn shortstat(&self, from: &str, to: &str) -> Result<(u64, u64, u64)> {
        Ok(parse_shortstat(&self.run(&[
            "diff",
            "--shortstat",
            from,
            to,
        ])?))
    }
}

impl Git {
    /// `query` answered by libgit2, or None when libgit2 cannot open the repository or
    /// fails to answer: then git's command line does.
    fn in_process<R>(
        &self,
        query: impl FnOnce(&git2::Repository) -> Result<R, git2::Error>,
    ) -> Option<R> {
        let taken = {
            let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
            let at = opened.iter().position(|(dir, _)| *dir == self.dir);
            at.map(|at| opened.swap_remove(at).1)
        };
        let repo = match taken {
            Some(repo) => repo,
            // Like `git -C`; and like grove's `git` commands, blind to GIT_DIR.
            None => git2::Repository::open_ext(
                &self.dir,
                git2::RepositoryOpenFlags::empty(),
                std::iter::empty::<&OsStr>(),
            )
            .ok()?,
        };
        let answer = query(&repo).ok();
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        if opened.len() == KEPT_OPEN {
            opened.remove(0);
        }
        opened.push((self.dir.clone(), repo));
        answer
    }
}

/// Repositories kept open between queries, for any thread to take one: opening one
/// reads its config files, and a `grove merge` asks the same one dozens of questions,
/// some from worker threads (`parallel`). What a git command changes meanwhile shows:
/// libgit2 reads refs and HEAD from disk each time, re-reads packed-refs when it
/// changed, and rescans packs for an object it misses.
const KEPT_OPEN: usize = 8;

static OPENED: std::sync::Mutex<Vec<(PathBuf, git2::Repository)>> =
    std::sync::Mutex::new(Vec::new());

fn peel_commit<'r>(repo: &'r git2::Repository, rev: &str) -> Result<git2::Commit<'r>, git2::Error> {
    repo.revparse_single(rev)?.peel_to_commit()
}

fn hex(commit: git2::Commit<'_>) -> String {
    commit.id().to_string()
}

/// Whether a path of `a` is one of `b`'s too, or a directory of one of `b`'s.
fn clash(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    a.iter().any(|path| {
        let inside = format!("{path}/");
        b.contains(path)
            || b.range(inside.clone()..)
                .next()
                .is_some_and(|q| q.starts_with(&inside))
    })
}

/// Which paths differ between two tree-ishes, as `git diff --no-renames` finds them.
fn tree_diff<'r>(
    repo: &'r git2::Repository,
    from: &str,
    to: &str,
    options: Option<&mut git2::DiffOptions>,
) -> Result<git2::Diff<'r>, git2::Error> {
    let from = repo.revparse_single(from)?.peel_to_tree()?;
    let to = repo.revparse_single(to)?.peel_to_tree()?;
    repo.diff_tree_to_tree(Some(&from), Some(&to), options)
}

/// Every path of a diff once, in git's order (by name). A file that became a symlink is
/// one path to git and two deltas of the same path to libgit2.
fn diff_paths(diff: &git2::Diff<'_>) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for delta in diff.deltas() {
        let file = match delta.status() {
            git2::Delta::Added => delta.new_file(),
            _ => delta.old_file(),
        };
        let Some(path) = file.path() else { continue };
        let path = path.to_string_lossy();
        if paths.last().map(String::as_str) != Some(&*path) {
            paths.push(path.into_owned());
        }
    }
    paths
}

/// [`Git::changes`] in process; None when the user's diff config asks for what libgit2
/// does not compute the way git does (another algorithm, wider hunks).
fn changes_of(
    repo: &git2::Repository,
    from: &str,
    to: &str,
) -> Result<Option<Changes>, git2::Error> {
    let config = repo.config()?.snapshot()?;
    let algorithm = config.get_string("diff.algorithm").ok();
    if algorithm.is_some_and(|a| !a.eq_ignore_ascii_case("myers") && a != "default")
        || config
            .get_i64("diff.interHunkContext")
            .is_ok_and(|n| n != 0)
    {
        return Ok(None);
    }
    let mut options = git2::DiffOptions::new();
    options
        .context_lines(0)
        .interhunk_lines(0)
        // git's default since 2.14, which `diff.indentHeuristic` may turn off.
        .indent_heuristic(config.get_bool("diff.indentHeuristic").unwrap_or(true));
    let diff = tree_diff(repo, from, to, Some(&mut options))?;
    let mut hunks: BTreeMap<String, Vec<Hunk>> = BTreeMap::new();
    diff.foreach(
        &mut |_, _| true,
        None,
        Some(&mut |delta, hunk| {
            let file = match delta.status() {
                git2::Delta::Added => delta.new_file(),
                _ => delta.old_file(),
            };
            if let Some(path) = file.path() {
                hunks
                    .entry(path.to_string_lossy().into_owned())
                    .or_default()
                    .push(Hunk {
                        start: u64::from(hunk.old_start()),
                        count: u64::from(hunk.old_lines()),
                    });
            }
            true
        }),
        None,
    )?;
    Ok(Some(Changes {
        files: diff_paths(&diff),
        hunks,
    }))
}

/// [`Git::worktrees`] in process, for a repository with a checkout of its own: the
/// main worktree, then the linked ones, read where git keeps them. None for what git
/// should describe itself (a bare repository, a linked worktree's view).
fn worktrees_of(repo: &git2::Repository) -> Result<Option<Vec<Worktree>>, git2::Error> {
    if repo.is_bare() || repo.is_worktree() {
        return Ok(None);
    }
    // git names the main worktree by the real path of its `.git`, minus `/.git`.
    let common = repo.commondir();
    let Some(main) = std::fs::canonicalize(common)
        .ok()
        .filter(|c| c.file_name() == Some(OsStr::new(".git")))
        .and_then(|c| c.parent().map(Path::to_path_buf))
    else {
        return Ok(None);
    };
    let branch_of = |head: &str| {
        let name = head.trim_end().strip_prefix("ref: ")?;
        Some(name.strip_prefix("refs/heads/").unwrap_or(name).to_string())
    };
    let read_head = |dir: &Path| {
        std::fs::read_to_string(dir.join("HEAD"))
            .map_err(|e| git2::Error::from_str(&format!("reading HEAD: {e}")))
    };
    let mut all = vec![Worktree {
        path: main,
        branch: branch_of(&read_head(common)?),
        locked: None,
    }];
    for name in repo.worktrees()?.iter().flatten() {
        let linked = repo.find_worktree(name)?;
        let locked = match linked.is_locked()? {
            git2::WorktreeLockStatus::Unlocked => None,
            git2::WorktreeLockStatus::Locked(reason) => Some(
                reason
                    .unwrap_or_default()
                    .trim_end_matches('\n')
                    .to_string(),
            ),
        };
        all.push(Worktree {
            path: linked.path().to_path_buf(),
            branch: branch_of(&read_head(&common.join("worktrees").join(name))?),
            locked,
        });
    }
    Ok(Some(all))
}

/// What git said, for an error message.
pub fn said(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if err.is_empty() {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        err
    }
}

fn show_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn split_z(out: &str) -> Vec<String> {
    out.split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// One entry of `git status --porcelain=v2 -z`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StatusEntry {
    pub kind: StatusKind,
    /// Relative to the top of the checkout; a directory ends with `/`.
    pub path: String,
    /// The whole record as git wrote it (modes and object ids included), for comparing
    /// one status with another.
    pub record: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatusKind {
    /// A tracked file whose index differs from HEAD (and maybe its content too).
    Staged,
    /// A tracked file whose content differs from the index, the index as HEAD.
    Modified,
    Unmerged,
    Untracked,
    Ignored,
}

fn parse_status(out: &str) -> Vec<StatusEntry> {
    let mut entries = Vec::new();
    let mut fields = out.split('\0').filter(|f| !f.is_empty());
    while let Some(field) = fields.next() {
        let mut words = field.splitn(2, ' ');
        let tag = words.next().unwrap_or_default();
        let rest = words.next().unwrap_or_default();
        // Words before the path: XY sub mH mI mW hH hI (1), plus Xscore (2), or
        // XY sub m1 m2 m3 mW h1 h2 h3 (u).
        let (kind, before_path) = match tag {
            "1" => (None, 7),
            "2" => (None, 8),
            "u" => (Some(StatusKind::Unmerged), 9),
            "?" => (Some(StatusKind::Untracked), 0),
            "!" => (Some(StatusKind::Ignored), 0),
            _ => continue,
        };
        let path = rest.splitn(before_path + 1, ' ').last().unwrap_or_default();
        let kind = kind.unwrap_or(if rest.starts_with('.') {
            StatusKind::Modified
        } else {
            StatusKind::Staged
        });
        let mut record = field.to_string();
        if tag == "2" {
            // The original path follows in a field of its own.
            record.push('\0');
            record.push_str(fields.next().unwrap_or_default());
        }
        entries.push(StatusEntry {
            kind,
            path: path.to_string(),
            record,
        });
    }
    entries
}

#[derive(Debug, Clone, Default)]
pub struct Worktree {
    pub path: PathBuf,
    /// Short name (`main`, `grove/x-1234abcd`), None when detached.
    pub branch: Option<String>,
    pub locked: Option<String>,
}

fn parse_worktrees(out: &str) -> Vec<Worktree> {
    let mut all = Vec::new();
    let mut current: Option<Worktree> = None;
    for field in out.split('\0') {
        if field.is_empty() {
            all.extend(current.take());
            continue;
        }
        let (key, value) = field.split_once(' ').unwrap_or((field, ""));
        match key {
            "worktree" => {
                all.extend(current.take());
                current = Some(Worktree {
                    path: PathBuf::from(value),
                    ..Worktree::default()
                });
            }
            "branch" => {
                if let Some(wt) = current.as_mut() {
                    wt.branch = Some(value.strip_prefix("refs/heads/").unwrap_or(value).into());
                }
            }
            "locked" => {
                if let Some(wt) = current.as_mut() {
                    wt.locked = Some(value.to_string());
                }
            }
            _ => {}
        }
    }
    all.extend(current);
    all
}

/// Files and hunks of one diff; what the overlaps cache stores per commit pair.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Changes {
    pub files: Vec<String>,
    pub hunks: BTreeMap<String, Vec<Hunk>>,
}

/// The old side of a `@@ -start,count` hunk header, as git prints it: `count` lines from
/// `start`, or with count 0 an insertion after line `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    pub start: u64,
    pub count: u64,
}

impl Hunk {
    /// Half-open span in gaps between lines, so an insertion is an empty span at its place.
    fn span(self) -> (u64, u64) {
        if self.count == 0 {
            (self.start + 1, self.start + 1)
        } else {
            (self.start, self.start + self.count)
        }
    }

    /// True when git's merge would see the two as one conflicting region: they overlap
    /// or touch (xdiff treats adjacent changes as a conflict too).
    pub fn collides(self, other: Hunk) -> bool {
        let (a0, a1) = self.span();
        let (b0, b1) = other.span();
        a0 <= b1 && b0 <= a1
    }

    pub fn label(self) -> String {
        match self.count {
            0 => format!("after {}", self.start),
            1 => self.start.to_string(),
            n => format!("{}-{}", self.start, self.start + n - 1),
        }
    }
}

/// The changes a patch as `git diff` prints it describes (a live agent's diff from the
/// daemon, say): every path it names, and its hunks, context lines included.
pub fn changes_from_patch(patch: &str) -> Changes {
    let mut files = BTreeSet::new();
    for line in patch.lines() {
        if let Some(path) = line.strip_prefix("--- ").and_then(|p| path_of(p, "a/")) {
            files.insert(path);
        } else if let Some(path) = line.strip_prefix("+++ ").and_then(|p| path_of(p, "b/")) {
            files.insert(path);
        } else if let Some(names) = line.strip_prefix("diff --git a/") {
            // Binary files have no ---/+++ lines; a plain name is enough here.
            if !names.contains('"') {
                if let Some((old, new)) = names.rsplit_once(" b/") {
                    files.insert(old.to_string());
                    files.insert(new.to_string());
                }
            }
        }
    }
    Changes {
        files: files.into_iter().collect(),
        hunks: parse_hunks(patch),
    }
}

fn parse_hunks(patch: &str) -> BTreeMap<String, Vec<Hunk>> {
    let mut hunks: BTreeMap<String, Vec<Hunk>> = BTreeMap::new();
    let mut old: Option<String> = None;
    let mut file: Option<String> = None;
    for line in patch.lines() {
        if line.starts_with("diff --git ") {
            old = None;
            file = None;
        } else if let Some(path) = line.strip_prefix("--- ") {
            old = path_of(path, "a/");
        } else if let Some(path) = line.strip_prefix("+++ ") {
            // A created file has no old path; its hunks still say where (line 0).
            file = old.take().or_else(|| path_of(path, "b/"));
        } else if line.starts_with("@@ ") {
            if let (Some(file), Some(hunk)) = (&file, parse_hunk_header(line)) {
                hunks.entry(file.clone()).or_default().push(hunk);
            }
        }
    }
    hunks
}

fn path_of(field: &str, prefix: &str) -> Option<String> {
    // git ends the name with a tab when it holds a space.
    let field = field.strip_suffix('\t').unwrap_or(field);
    if field == "/dev/null" {
        return None;
    }
    let name = if field.starts_with('"') {
        unquote(field)?
    } else {
        field.to_string()
    };
    name.strip_prefix(prefix).map(str::to_string)
}

/// Undoes git's C-style quoting of unusual path names.
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next()? {
            b'n' => bytes.push(b'\n'),
            b't' => bytes.push(b'\t'),
            b'r' => bytes.push(b'\r'),
            b'a' => bytes.push(7),
            b'b' => bytes.push(8),
            b'f' => bytes.push(12),
            b'v' => bytes.push(11),
            d @ b'0'..=b'7' => {
                let mut value = u32::from(d - b'0');
                for _ in 0..2 {
                    let next = chars.next()?;
                    value = value * 8 + u32::from(next.checked_sub(b'0')?);
                }
                bytes.push(u8::try_from(value).ok()?);
            }
            other => bytes.push(other),
        }
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn parse_hunk_header(line: &str) -> Option<Hunk> {
    let old = line.strip_prefix("@@ -")?.split(' ').next()?;
    let (start, count) = match old.split_once(',') {
        Some((s, c)) => (s.parse().ok()?, c.parse().ok()?),
        None => (old.parse().ok()?, 1),
    };
    Some(Hunk { start, count })
}

fn parse_shortstat(out: &str) -> (u64, u64, u64) {
    let mut stat = (0, 0, 0);
    for part in out.trim().split(", ") {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next().and_then(|n| n.parse().ok()), words.next())
        else {
            continue;
        };
        if what.starts_with("file") {
            stat.0 = n;
        } else if what.starts_with("insertion") {
            stat.1 = n;
        } else if what.starts_with("deletion") {
            stat.2 = n;
        }
    }
    stat
}

/// Where grove keeps the merges it made: `refs/grove/merged/<target>/<id>`, the agent's
/// tip that went into the target. git's history shows a true merge; a squash or a rebase
/// leaves no trace of the branch there.
fn merge_record(target: &str, id: &str) -> String {
    format!("refs/grove/merged/{target}/{id}")
}

/// An agent's branch as git sees it now; the record may be stale (a branch deleted by
/// hand, a base that moved on).
pub struct Work {
    pub record: AgentRecord,
    pub git: Git,
    pub tip: String,
    /// What the branch is compared against: the base branch while it exists, else the
    /// commit the agent started from.
    pub base: String,
    pub base_tip: String,
    pub merge_base: String,
    /// grove merged this very tip into the base (by squash or rebase, say).
    pub merged_by_grove: bool,
}

impl Work {
    /// None when the agent has no branch (any more) or its repository is gone.
    pub fn load(record: AgentRecord) -> Result<Option<Work>> {
        Work::load_with(record, None)
    }

    /// [`Work::load`], with the repository's refs read already (`tips`): only the merge
    /// base costs a git of its own.
    fn load_with(record: AgentRecord, tips: Option<&Tips>) -> Result<Option<Work>> {
        if !record.branch_exists || !record.repo.is_dir() {
            return Ok(None);
        }
        let git = Git::new(&record.repo);
        let commit = |name: String| match tips {
            Some(tips) => Ok(tips.0.get(&name).cloned()),
            None => git.commit(&name),
        };
        let Some(tip) = commit(format!("refs/heads/{}", record.branch))? else {
            return Ok(None);
        };
        let (base, base_tip) = match commit(format!("refs/heads/{}", record.base_ref))? {
            Some(tip) => (record.base_ref.clone(), tip),
            None => (record.base_commit.clone(), record.base_commit.clone()),
        };
        let merge_base = git
            .merge_base(&base_tip, &tip)?
            .unwrap_or_else(|| record.base_commit.clone());
        let merged_by_grove = commit(merge_record(&base, &record.id))?.as_ref() == Some(&tip);
        Ok(Some(Work {
            record,
            git,
            tip,
            base,
            base_tip,
            merge_base,
            merged_by_grove,
        }))
    }

    pub fn live(&self) -> bool {
        !self.record.status.is_final()
    }

    /// True once the base contains the whole branch, or grove merged it there.
    pub fn merged(&self) -> bool {
        self.tip == self.merge_base || self.merged_by_grove
    }

    /// The base for people: a branch name, or a short commit.
    pub fn base_label(&self) -> String {
        if self.base == self.record.base_ref && self.base != self.record.base_commit {
            self.base.clone()
        } else {
            short(&self.base)
        }
    }

    pub fn state(&self) -> &'static str {
        if self.live() {
            "live"
        } else if self.merged() {
            "merged"
        } else {
            "unmerged"
        }
    }
}

/// Every branch tip and grove merge record of one repository, by ref name: one read
/// instead of three per agent.
struct Tips(std::collections::HashMap<String, String>);

impl Tips {
    fn read(git: &Git) -> Result<Tips> {
        if let Some(tips) = git.in_process(tips_of) {
            return Ok(tips);
        }
        let listed = git.run(&[
            "for-each-ref",
            "--format=%(objecttype) %(objectname) %(refname)",
            "refs/heads/",
            "refs/grove/merged/",
        ])?;
        let commits = listed.lines().filter_map(|line| {
            let (kind, rest) = line.split_once(' ')?;
            let (oid, name) = rest.split_once(' ')?;
            (kind == "commit").then(|| (name.to_string(), oid.to_string()))
        });
        Ok(Tips(commits.collect()))
    }
}

/// [`Tips::read`] in process: refs that name a commit directly, as `for-each-ref`'s
/// `%(objecttype)` tells them.
fn tips_of(repo: &git2::Repository) -> Result<Tips, git2::Error> {
    let mut tips = std::collections::HashMap::new();
    for glob in ["refs/heads/*", "refs/grove/merged/*"] {
        for reference in repo.references_glob(glob)? {
            let reference = reference?;
            let (Some(name), Some(oid)) = (reference.name(), reference.target()) else {
                continue;
            };
            if repo.find_object(oid, None)?.kind() == Some(git2::ObjectType::Commit) {
                tips.insert(name.to_string(), oid.to_string());
            }
        }
    }
    Ok(Tips(tips))
}

/// Every agent of `records` whose branch exists, in `records`' order.
pub fn works(records: Vec<AgentRecord>) -> Result<Vec<Work>> {
    let mut tips: BTreeMap<PathBuf, Option<Tips>> = BTreeMap::new();
    for record in &records {
        if !tips.contains_key(&record.repo) && record.repo.is_dir() {
            // A repository whose refs cannot be listed is read ref by ref.
            tips.insert(
                record.repo.clone(),
                Tips::read(&Git::new(&record.repo)).ok(),
            );
        }
    }
    let loaded = crate::parallel::map(records, |record| {
        let id = record.id.clone();
        let repo_tips = tips.get(&record.repo).and_then(Option::as_ref);
        Work::load_with(record, repo_tips).with_context(|| format!("reading agent {id}"))
    });
    let mut works = Vec::new();
    for work in loaded {
        works.extend(work?);
    }
    Ok(works)
}

pub fn short(oid: &str) -> String {
    oid.chars().take(10).collect()
}

pub fn same_path(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository made by git: a branch, a linked worktree locked with a reason,
    /// a detached one, a file renamed and files edited in places.
    fn made_by_git(test: &str) -> (PathBuf, Git) {
        let root = std::env::temp_dir().join(format!("grove-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let repo = root.join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        let git = Git::new(&repo);
        let lines = |n: u32, changed: &[u32]| -> String {
            (1..=n)
                .map(|i| match changed.contains(&i) {
                    true => format!("changed {i}\n"),
                    false => format!("line {i}\n"),
                })
                .collect()
        };
        git.run(&["init", "-q", "-b", "main"]).expect("init");
        git.run(&["config", "user.email", "t@t"]).expect("config");
        git.run(&["config", "user.name", "t"]).expect("config");
        std::fs::write(repo.join("a.txt"), lines(40, &[])).expect("write");
        std::fs::write(repo.join("gone.txt"), "x\n").expect("write");
        git.run(&["add", "-A"]).expect("add");
        git.run(&["commit", "-qm", "one"]).expect("commit");
        git.run(&["branch", "side"]).expect("branch");
        std::fs::write(repo.join("a.txt"), lines(42, &[3, 4, 20])).expect("write");
        std::fs::write(repo.join("new file.txt"), "new\n").expect("write");
        git.run(&["rm", "-q", "gone.txt"]).expect("rm");
        git.run(&["add", "-A"]).expect("add");
        git.run(&["commit", "-qm", "two"]).expect("commit");
        let linked = root.join("linked");
        let detached = root.join("detached");
        let (linked_s, detached_s) = (
            linked.to_str().expect("path"),
            detached.to_str().expect("path"),
        );
        git.run(&["worktree", "add", "-q", linked_s, "side"])
            .expect("worktree");
        git.run(&["worktree", "lock", "--reason", "held by x", linked_s])
            .expect("lock");
        git.run(&["worktree", "add", "-q", "--detach", detached_s, "HEAD"])
            .expect("worktree");
        (root, git)
    }

    #[test]
    fn in_process_answers_are_what_the_command_line_says() {
        let (root, git) = made_by_git("in-process");
        let listed = parse_worktrees(
            &git.run(&["worktree", "list", "--porcelain", "-z"])
                .expect("list"),
        );
        let mut mine = git.worktrees().expect("worktrees");
        assert!(git.in_process(|_| Ok(())).is_some(), "libgit2 opens it");
        mine[1..].sort_by(|a, b| a.path.cmp(&b.path));
        let key = |w: &Worktree| (w.path.clone(), w.branch.clone(), w.locked.clone());
        assert_eq!(
            mine.iter().map(key).collect::<Vec<_>>(),
            listed.iter().map(key).collect::<Vec<_>>()
        );
        assert_eq!(mine[2].locked.as_deref(), Some("held by x"));

        assert_eq!(
            git.current_branch().expect("branch").as_deref(),
            Some("main")
        );
        let detached = Git::new(root.join("detached"));
        assert_eq!(detached.current_branch().expect("branch"), None);
        assert_eq!(
            Git::new(root.join("linked"))
                .current_branch()
                .expect("b")
                .as_deref(),
            Some("side")
        );
        let rev = |r: &str| {
            git.run(&["rev-parse", r])
                .expect("rev-parse")
                .trim()
                .to_string()
        };
        assert_eq!(git.head().expect("head"), rev("HEAD"));
        assert_eq!(detached.head().expect("head"), rev("HEAD"));
        assert_eq!(git.branch_tip("side").expect("tip"), Some(rev("side")));
        assert_eq!(git.branch_tip("nothing").expect("tip"), None);
        assert_eq!(
            git.merge_base("main", "side").expect("base"),
            Some(rev("side"))
        );
        assert!(git.is_ancestor("side", "main").expect("ancestor"));
        assert!(!git.is_ancestor("main", "side").expect("ancestor"));

        let changes = git.changes("side", "main").expect("changes");
        let files = split_z(
            &git.run(&["diff", "--name-only", "-z", "--no-renames", "side", "main"])
                .expect("diff"),
        );
        let patch = git
            .run(&[
                "diff",
                "-U0",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                "side",
                "main",
            ])
            .expect("diff");
        assert_eq!(changes.files, files);
        assert_eq!(changes.files, ["a.txt", "gone.txt", "new file.txt"]);
        assert_eq!(changes.hunks, parse_hunks(&patch));
        assert_eq!(git.changed_paths("side", "main").expect("paths"), files);

        git.record_merge("main", "abc", &rev("side"))
            .expect("record");
        assert_eq!(
            git.recorded_merge("main", "abc").expect("read"),
            Some(rev("side"))
        );
        assert_eq!(
            git.run(&["rev-parse", "refs/grove/merged/main/abc"])
                .expect("rev-parse")
                .trim(),
            rev("side")
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_union_merge_is_one_of_paths_apart() {
        let set =
            |paths: &[&str]| -> BTreeSet<String> { paths.iter().map(|p| p.to_string()).collect() };
        assert!(!clash(&set(&["a", "b/c"]), &set(&["b/d", "bc"])));
        assert!(clash(&set(&["a"]), &set(&["a"])));
        assert!(clash(&set(&["lib"]), &set(&["lib/x"])));
        assert!(
            !clash(&set(&["lib/x"]), &set(&["lib"])),
            "the other way round is the other call"
        );
        let (root, git) = made_by_git("union");
        // main deleted gone.txt since side forked: git could see a rename there.
        assert_eq!(git.union_merge_writes("main", "side"), None);
        git.run(&["branch", "other", "main"]).expect("branch");
        let linked = Git::new(root.join("linked"));
        std::fs::write(root.join("linked/only-side.txt"), "x\n").expect("write");
        linked.run(&["add", "-A"]).expect("add");
        linked.run(&["commit", "-qm", "side only"]).expect("commit");
        // side added one file; main's deletion is on main's side of the fork.
        assert_eq!(git.union_merge_writes("side", "main"), None);
        assert_eq!(git.union_merge_writes("other", "main"), Some(set(&[])));
        git.run(&["checkout", "-q", "-b", "plain", "side~1"])
            .expect("checkout");
        std::fs::write(root.join("repo/plain.txt"), "x\n").expect("write");
        git.run(&["add", "-A"]).expect("add");
        git.run(&["commit", "-qm", "plain"]).expect("commit");
        assert_eq!(
            git.union_merge_writes("side", "plain"),
            Some(set(&["plain.txt"]))
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn hunk_headers_in_old_line_numbers() {
        let patch = "diff --git a/src/lib.txt b/src/lib.txt\n\
                     index 1..2 100644\n--- a/src/lib.txt\n+++ b/src/lib.txt\n\
                     @@ -2 +2 @@ x\n-two\n+TWO\n@@ -5,0 +6,2 @@\n+a\n+b\n\
                     diff --git a/new b/new\nnew file mode 100644\n--- /dev/null\n+++ b/new\n\
                     @@ -0,0 +1 @@\n+x\n\
                     diff --git \"a/sp\\303\\251 c\" \"b/sp\\303\\251 c\"\n--- \"a/sp\\303\\251 c\"\n\
                     +++ \"b/sp\\303\\251 c\"\n@@ -1,3 +0,0 @@\n-1\n-2\n-3\n";
        let hunks = parse_hunks(patch);
        assert_eq!(
            hunks["src/lib.txt"],
            vec![Hunk { start: 2, count: 1 }, Hunk { start: 5, count: 0 }]
        );
        assert_eq!(hunks["new"], vec![Hunk { start: 0, count: 0 }]);
        assert_eq!(hunks["spé c"], vec![Hunk { start: 1, count: 3 }]);
    }

    #[test]
    fn hunks_collide_when_they_overlap_or_touch() {
        let h = |start, count| Hunk { start, count };
        assert!(h(2, 1).collides(h(2, 1)));
        assert!(h(2, 1).collides(h(3, 1)));
        assert!(!h(1, 1).collides(h(3, 1)));
        assert!(h(3, 0).collides(h(3, 1)));
        assert!(!h(1, 0).collides(h(3, 1)));
        assert_eq!(h(3, 0).label(), "after 3");
        assert_eq!(h(3, 2).label(), "3-4");
    }

    #[test]
    fn shortstat_and_worktrees() {
        assert_eq!(
            parse_shortstat(" 3 files changed, 5 insertions(+), 1 deletion(-)\n"),
            (3, 5, 1)
        );
        assert_eq!(
            parse_shortstat(" 1 file changed, 2 deletions(-)\n"),
            (1, 0, 2)
        );
        let wts = parse_worktrees(
            "worktree /r\0HEAD 1\0branch refs/heads/main\0\0\
             worktree /w\0HEAD 2\0detached\0locked grove agent x\0\0",
        );
        assert_eq!(wts.len(), 2);
        assert_eq!(wts[0].branch.as_deref(), Some("main"));
        assert_eq!(wts[1].branch, None);
        assert_eq!(wts[1].locked.as_deref(), Some("grove agent x"));
    }

    #[test]
    fn status_entries_parse_with_odd_names() {
        let out = "1 .M N... 100644 100644 100644 aa aa with space.txt\0\
                   1 A. N... 000000 100644 100644 00 bb new\nline\0\
                   2 R. N... 100644 100644 100644 aa aa R100 to\0from\0\
                   u UU N... 100644 100644 100644 100644 a b c f\0\
                   ? notes.txt\0! build/\0! build.out\0";
        let entries = parse_status(out);
        let got: Vec<(StatusKind, &str)> =
            entries.iter().map(|e| (e.kind, e.path.as_str())).collect();
        use StatusKind::*;
        assert_eq!(
            got,
            [
                (Modified, "with space.txt"),
                (Staged, "new\nline"),
                (Staged, "to"),
                (Unmerged, "f"),
                (Untracked, "notes.txt"),
                (Ignored, "build/"),
                (Ignored, "build.out"),
            ]
        );
        assert_eq!(
            entries[2].record,
            "2 R. N... 100644 100644 100644 aa aa R100 to\0from"
        );
    }
}

//! The `git` command line, for reviewing and merging agents' branches.
//!
//! Everything here shells out to `git` instead of using git2: a merge, rebase or commit
//! must run the user's hooks, merge drivers, rerere and `merge.*`/`commit.*` config,
//! exactly as if they had typed the command, and reading goes the same way so that both
//! halves see the repository identically.

use anyhow::{bail, Context, Result};
use grove_proto::types::AgentRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
        self.run(&["update-ref", "-m", &message, &merge_record(target, id), tip])
            .map(|_| ())
    }

    pub fn head(&self) -> Result<String> {
        Ok(self.run(&["rev-parse", "HEAD"])?.trim().to_string())
    }

    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> Result<bool> {
        self.test(&["merge-base", "--is-ancestor", ancestor, of])
    }

    pub fn merge_base(&self, a: &str, b: &str) -> Result<Option<String>> {
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
        let common = self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
        let out = grove_proto::git::command()
            .arg("--git-dir")
            .arg(common.trim_end_matches('\n'))
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

    /// The branch checked out here, None on a detached HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let out = self.output(&["symbolic-ref", "-q", "--short", "HEAD"])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    pub fn worktrees(&self) -> Result<Vec<Worktree>> {
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
    let mut files = std::collections::BTreeSet::new();
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

/// Every agent of `records` whose branch exists, in `records`' order.
/// Every branch tip and grove merge record of one repository, by ref name: one git
/// instead of three per agent.
struct Tips(std::collections::HashMap<String, String>);

impl Tips {
    fn read(git: &Git) -> Result<Tips> {
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

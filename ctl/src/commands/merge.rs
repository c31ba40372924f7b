//! `grove merge`: an agent's branch into a target branch, with git's own machinery so
//! that hooks, merge drivers and config apply. Either it succeeds, or the repository is
//! left exactly as it was: HEAD, index, working tree and the agent's branch.
//!
//! git itself overwrites an ignored file the merge brings in, and a conflict's abort
//! deletes it, so grove refuses first when any path the merge would write is untracked,
//! ignored or has uncommitted changes, and it says "nothing was changed" only after
//! comparing the checkout with a snapshot taken before.
//!
//! git runs here, in the user's process (their hooks, signing and credentials apply),
//! under a lease on the repository from the daemon (`repo.lease`): grove makes no change
//! of its own to it meanwhile. Temporary worktrees go where the daemon says, under the
//! worktree root, where its janitor salvages and removes what a crash left; the daemon
//! is told what was merged (`agent.merged`).

use crate::commands::overlaps::{candidates, ChangeCache, Radar};
use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use crate::gitcli::{said, same_path, short, works, Git, StatusEntry, StatusKind, Work, Worktree};
use crate::output::{print_json, safe, safe_path};
use anyhow::{bail, Context, Result};
use grove_proto::methods::{Get, IdParams, Lease, LeaseParams, Merged, MergedParams};
use grove_proto::types::AgentRecord;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Merge,
    Squash,
    Rebase,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Merge => "merge",
            Mode::Squash => "squash",
            Mode::Rebase => "rebase",
        }
    }
}

#[derive(Serialize)]
struct Report {
    id: String,
    branch: String,
    target: String,
    mode: &'static str,
    /// Where git ran the merge.
    worktree: PathBuf,
    /// The target was checked out nowhere, so grove used a worktree of its own.
    temporary: bool,
    /// "merged", "up_to_date" or "conflict".
    result: &'static str,
    commit: Option<String>,
    conflicts: Vec<Conflict>,
    /// Suggested order for the other unmerged agent branches of the repository.
    order: Vec<Next>,
    /// With `--delete`: "deleted", or why the branch was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    deleted: Option<String>,
}

#[derive(Serialize)]
struct Conflict {
    path: String,
    also_changed_by: Vec<Other>,
}

#[derive(Serialize)]
struct Other {
    id: String,
    branch: String,
    state: String,
}

#[derive(Serialize)]
struct Next {
    id: String,
    branch: String,
    /// Other unmerged branches that change some of the same files.
    overlaps: usize,
    /// Its files that its base changed since it forked.
    base_changed_files: usize,
}

enum Attempt {
    Merged(String),
    UpToDate,
    Conflict(Vec<String>),
}

pub fn run(
    id: &str,
    mode: Mode,
    into: Option<String>,
    delete: bool,
    json: bool,
) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let record = client.call::<Get>(&IdParams { id: id.into() })?;
    let id = record.id.clone();
    if !record.status.is_final() {
        return Err(usage(format!(
            "agent {id} is still {}; wait for it (`grove wait {id}`) or stop it (`grove kill {id}`) first",
            record.status
        )));
    }
    let work = Work::load(record)?.ok_or_else(|| {
        usage(format!(
            "agent {id} has no branch to merge: it left no commits beyond its base, or its branch was deleted"
        ))
    })?;
    let lease = RepoLease::take(&work.record.repo)?;
    let git = work.git.clone();
    let branch = work.record.branch.clone();
    let worktrees = git.worktrees()?;
    let main = worktrees.first().map(|w| w.path.clone());
    let target = match into {
        Some(target) => target,
        None => git.current_branch()?.ok_or_else(|| {
            usage(format!(
                "{} has a detached HEAD; check out the branch to merge into, or pass --into BRANCH",
                git.dir.display()
            ))
        })?,
    };
    if target == branch {
        return Err(usage(format!(
            "{branch} is the agent's own branch; pass --into another branch"
        )));
    }
    let before = git.branch_tip(&target)?.ok_or_else(|| {
        usage(format!(
            "there is no branch {target} in {}",
            git.dir.display()
        ))
    })?;

    // A squash or a rebase leaves nothing git could recognise: grove's own record says
    // this tip is in the target already, and merging it again would only add an empty
    // commit.
    let already = git.recorded_merge(&target, &id)?.as_ref() == Some(&work.tip);

    // Every check before the first change: a refusal leaves everything as it was.
    let checked_out = |name: &str| worktrees.iter().find(|w| w.branch.as_deref() == Some(name));
    let target_wt = checked_out(&target);
    // The status read for the check is the snapshot's too: on a big checkout each
    // `git status` is a walk of every file.
    // The other agents, for the answer, are asked for meanwhile.
    let (checked, others) = std::thread::scope(|scope| {
        let others = scope.spawn(|| crate::connect::list_agents(&mut client, true));
        let checked = usable(
            &git,
            target_wt.filter(|_| !already),
            &target,
            (&before, &work.tip),
            false,
        );
        let others = others
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (checked, others)
    });
    let (target_writes, target_status) = checked?;
    let others: Vec<AgentRecord> = others?
        .into_iter()
        .filter(|r| r.id != id && same_path(&r.repo, &work.record.repo))
        .collect();
    // A rebase rewrites the agent's side with what the target changed, and git rebases
    // only a checkout without uncommitted changes.
    let (agent_wt, (agent_writes, agent_status)) = match mode {
        Mode::Rebase => {
            let wt = checked_out(&branch);
            (wt, usable(&git, wt, &branch, (&work.tip, &before), true)?)
        }
        _ => (None, (BTreeSet::new(), None)),
    };

    // A target checked out nowhere gets a temporary worktree rather than a refusal: git
    // needs a working tree to merge in, and borrowing one of the user's checkouts would
    // switch its branch and rewrite its files under them.
    let target_place = Place::new(&git, &target, target_wt, &id, "target", &lease)?;
    if !json {
        match target_wt {
            Some(wt) if Some(&wt.path) != main.as_ref() => eprintln!(
                "note: {} is checked out in {}; merging there",
                safe(&target),
                safe_path(&wt.path)
            ),
            None => eprintln!(
                "note: {} is not checked out anywhere; merging in a temporary worktree, removed afterwards",
                safe(&target)
            ),
            _ => {}
        }
    }
    let t = &target_place.git;
    let was = Snapshot::take_from(t, &target_writes, target_status)?;
    let attempt = match mode {
        _ if already => Attempt::UpToDate,
        Mode::Merge => merge(t, &work, &target, &was)?,
        Mode::Squash => squash(t, &work, &was)?,
        Mode::Rebase => {
            let agent_place = Place::new(&git, &branch, agent_wt, &id, "agent", &lease)?;
            if let (Some(wt), false) = (agent_wt, json) {
                eprintln!(
                    "note: {} is checked out in {}; rebasing it there",
                    safe(&branch),
                    safe_path(&wt.path)
                );
            }
            let a = &agent_place.git;
            let agent_was = Snapshot::take_from(a, &agent_writes, agent_status)?;
            rebase(t, a, &work, &target, &was, &agent_was)?
        }
    };

    let mut report = Report {
        id: id.clone(),
        branch: branch.clone(),
        target: target.clone(),
        mode: mode.as_str(),
        worktree: target_place.git.dir.clone(),
        temporary: target_place.temp.is_some(),
        result: "merged",
        commit: None,
        conflicts: Vec::new(),
        order: Vec::new(),
        deleted: None,
    };
    drop(target_place);
    match attempt {
        Attempt::Conflict(files) => {
            report.result = "conflict";
            report.conflicts = blame(&git, &files, &work, &target, &before, others)?;
            if json {
                print_json(&report)?;
            } else {
                eprint!("{}", conflict_text(&report));
            }
            return Ok(ExitCode::from(1));
        }
        Attempt::UpToDate => report.result = "up_to_date",
        Attempt::Merged(commit) => report.commit = Some(commit),
    }
    // A rebase moved the branch: its new tip is what the target holds.
    let merged_tip = git.branch_tip(&branch)?.unwrap_or_else(|| work.tip.clone());
    // The suggested order reads only the other branches: it is worked out while git
    // records this merge and the daemon hears of it.
    let (told, order) = std::thread::scope(|scope| {
        let order = scope.spawn(|| suggested_order(others));
        let told = (|| {
            git.record_merge(&target, &id, &merged_tip)?;
            if delete {
                report.deleted = Some(delete_branch(&git, &branch, &worktrees)?);
            }
            client.call::<Merged>(&MergedParams {
                id: id.clone(),
                target: target.clone(),
                mode: mode.as_str().into(),
                tip: merged_tip.clone(),
                commit: report.commit.clone(),
                deleted: report.deleted.as_deref() == Some("deleted"),
            })?;
            anyhow::Ok(())
        })();
        let order = order
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (told, order)
    });
    told?;
    drop(lease);
    report.order = order?;
    if json {
        print_json(&report)?;
    } else {
        print!("{}", success_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The other unmerged branches, in the order that merges them with the fewest conflicts.
fn suggested_order(others: Vec<AgentRecord>) -> Result<Vec<Next>> {
    let mut cache = ChangeCache::open()?;
    let radar = Radar::new(candidates(others)?, &mut cache)?;
    cache.save(false);
    Ok(radar
        .merge_order()
        .into_iter()
        .map(|(i, overlaps, base_changed_files)| Next {
            id: radar.works[i].record.id.clone(),
            branch: radar.works[i].record.branch.clone(),
            overlaps,
            base_changed_files,
        })
        .collect())
}

/// `--delete`: the merged branch goes; its tip stays under grove's merge record. A
/// branch checked out somewhere (a kept worktree) stays, and the answer says why.
fn delete_branch(git: &Git, branch: &str, worktrees: &[Worktree]) -> Result<String> {
    if let Some(wt) = worktrees
        .iter()
        .find(|w| w.branch.as_deref() == Some(branch))
    {
        return Ok(format!(
            "kept: {branch} is checked out in {} (`grove rm` removes a kept worktree)",
            wt.path.display()
        ));
    }
    git.run(&["branch", "-D", "--end-of-options", branch])?;
    Ok("deleted".into())
}

fn usage(message: String) -> anyhow::Error {
    UsageError(message).into()
}

/// The paths a merge of `theirs` into `ours` writes, and, when `branch` is checked out
/// (`wt`), that checkout's status as read to make sure git may merge there (see
/// [`check`]). The status walk and git's preview of the merge run at once: each is a
/// git of its own, and neither needs the other.
fn usable(
    git: &Git,
    wt: Option<&Worktree>,
    branch: &str,
    (ours, theirs): (&str, &str),
    all_clean: bool,
) -> Result<(BTreeSet<String>, Option<Vec<StatusEntry>>)> {
    let Some(wt) = wt else {
        return Ok((touched(git, ours, theirs)?, None));
    };
    let path = safe_path(&wt.path);
    if let Some(reason) = &wt.locked {
        return Err(usage(format!(
            "{} is checked out in {path}, which is locked ({}); nothing was changed",
            safe(branch),
            safe(reason)
        )));
    }
    let (writes, status) = std::thread::scope(|scope| {
        let status = scope.spawn(|| Git::new(&wt.path).status_entries());
        let writes = touched(git, ours, theirs);
        let status = status
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (writes, status)
    });
    let writes = writes?;
    let status = status.with_context(|| format!("checking {path}"))?;
    check(wt, branch, &status, &writes, all_clean)?;
    Ok((writes, Some(status)))
}

/// A worktree git may merge in: not held by a running agent, nothing staged (git merges
/// only onto a clean index, and undoing a failed merge would unstage it), and none of
/// the paths the merge `writes` untracked, ignored or changed; with `all_clean`, no
/// uncommitted change at all. Refuses a checkout where the merge would overwrite what
/// is not committed.
fn check(
    wt: &Worktree,
    branch: &str,
    status: &[StatusEntry],
    writes: &BTreeSet<String>,
    all_clean: bool,
) -> Result<()> {
    let path = safe_path(&wt.path);
    let branch = safe(branch);
    let found = obstacles(&wt.path, status, writes, all_clean);
    if found.is_empty() {
        return Ok(());
    }
    let shown = found
        .iter()
        .take(10)
        .map(|(what, p)| format!("\n  {what}: {}", safe(p)))
        .collect::<String>();
    let more = if found.len() > 10 {
        format!("\n  ... and {} more", found.len() - 10)
    } else {
        String::new()
    };
    Err(usage(format!(
        "refusing to merge: in {path} (where {branch} is checked out) the merge would \
         overwrite or delete files that are not committed (uncommitted changes, untracked \
         or ignored files):{shown}{more}\ncommit, move or stash them first \
         (`git stash --include-untracked`; ignored files git never stashes); nothing was changed"
    )))
}

/// What stands in the way of writing `writes` in the checkout at `root`, as (what, path).
fn obstacles(
    root: &Path,
    status: &[StatusEntry],
    writes: &BTreeSet<String>,
    all_clean: bool,
) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for entry in status {
        let what = match entry.kind {
            StatusKind::Staged => "staged",
            StatusKind::Unmerged => "unmerged",
            StatusKind::Modified => "uncommitted changes",
            StatusKind::Untracked => "untracked",
            StatusKind::Ignored => "ignored",
        };
        let hit = match entry.kind {
            StatusKind::Staged | StatusKind::Unmerged => true,
            StatusKind::Modified => all_clean || writes.contains(&entry.path),
            StatusKind::Untracked | StatusKind::Ignored => in_the_way(root, &entry.path, writes),
        };
        if hit {
            found.push((what, entry.path.clone()));
        }
    }
    found
}

/// Whether an untracked or ignored `path` (a directory when it ends with `/`) is where
/// the merge writes: the same path, a file where it needs a directory, or a directory
/// holding something the merge would replace.
fn in_the_way(root: &Path, path: &str, writes: &BTreeSet<String>) -> bool {
    let name = path.trim_end_matches('/');
    if name.is_empty() {
        return false;
    }
    if writes.contains(name) {
        return true;
    }
    // A written path is inside this file or directory.
    let inside = format!("{name}/");
    let mut within = writes
        .range(inside.clone()..)
        .take_while(|w| w.starts_with(&inside));
    let taken = within.any(|w| {
        // In a directory git does not track, only what exists collides.
        !path.ends_with('/') || occupied(root, name, w)
    });
    if taken {
        return true;
    }
    // This path is inside a file the merge writes.
    let mut prefix = String::new();
    for part in name.split('/') {
        if !prefix.is_empty() && writes.contains(&prefix) {
            return true;
        }
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
    }
    false
}

/// Whether `written`, below the untracked directory `dir`, exists, or one of its
/// parents below `dir` is something other than a directory.
fn occupied(root: &Path, dir: &str, written: &str) -> bool {
    let mut at = dir.len();
    loop {
        let next = written[at + 1..].find('/').map(|i| at + 1 + i);
        let part = &written[..next.unwrap_or(written.len())];
        match fs::symlink_metadata(root.join(part)) {
            Err(_) => return false,
            Ok(meta) if next.is_none() || !meta.is_dir() => return true,
            Ok(_) => at = next.unwrap_or(written.len()),
        }
    }
}

/// Paths a merge of `theirs` into `ours` may write: what `theirs` changed since the
/// two forked, and where git's merged tree differs from `ours` (a rename on one side
/// carries the other side's change to a new path).
fn touched(git: &Git, ours: &str, theirs: &str) -> Result<BTreeSet<String>> {
    // The common case, branches that changed different files, needs no preview by git.
    if let Some(paths) = git.union_merge_writes(ours, theirs) {
        return Ok(paths);
    }
    let mut paths = BTreeSet::new();
    match git.merge_base(ours, theirs)? {
        Some(fork) => paths.extend(git.changed_paths(&fork, theirs)?),
        None => paths.extend(git.changed_paths(ours, theirs)?),
    }
    let scratch = Scratch::new()?;
    if let Some(tree) = git.merge_tree(ours, theirs, &scratch.0)? {
        paths.extend(git.changed_paths(ours, &tree)?);
    }
    Ok(paths)
}

/// An empty directory of our own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dirs()?
            .state_dir
            .join("tmp")
            .join(format!("merge-scratch-{}-{n}", std::process::id()));
        // Left over by a crash of a process with our pid: ours to clear.
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a checkout looked like before an attempt: HEAD, every status entry (index and
/// tracked files by object id, untracked and ignored files by name), and the files
/// git does not track at the paths the merge writes, by inode, size and mtime.
struct Snapshot {
    head: String,
    status: BTreeMap<String, String>,
    files: BTreeMap<String, Option<FileId>>,
}

#[derive(PartialEq, Eq)]
struct FileId {
    mode: u32,
    size: u64,
    ino: u64,
    mtime_ns: i128,
}

impl Snapshot {
    fn take(t: &Git, writes: &BTreeSet<String>) -> Result<Snapshot> {
        Snapshot::take_from(t, writes, None)
    }

    /// [`Snapshot::take`] with the checkout's status read already, when it was.
    fn take_from(
        t: &Git,
        writes: &BTreeSet<String>,
        status: Option<Vec<StatusEntry>>,
    ) -> Result<Snapshot> {
        let status = match status {
            Some(status) => status,
            None => t.status_entries()?,
        };
        let status: BTreeMap<String, String> =
            status.into_iter().map(|e| (e.path, e.record)).collect();
        // Tracked files are compared by status; the rest git would not report.
        let reported = |p: &str| {
            status
                .keys()
                .any(|s| s == p || (s.ends_with('/') && p.starts_with(s.as_str())))
        };
        let mut files = BTreeMap::new();
        for path in writes {
            let id = file_id(&t.dir.join(path));
            if id.is_none() || reported(path) {
                files.insert(path.clone(), id);
            }
        }
        Ok(Snapshot {
            head: t.head()?,
            status,
            files,
        })
    }

    /// Nothing when the checkout is as it was; else each difference, for people.
    fn differences(&self, t: &Git) -> Result<Vec<String>> {
        let now = Snapshot::take(t, &self.files.keys().cloned().collect())?;
        let mut diffs = Vec::new();
        if now.head != self.head {
            diffs.push(format!(
                "HEAD moved from {} to {}",
                short(&self.head),
                short(&now.head)
            ));
        }
        let paths: BTreeSet<&String> = self.status.keys().chain(now.status.keys()).collect();
        for path in paths {
            let (was, is) = (self.status.get(path), now.status.get(path));
            if was != is {
                diffs.push(format!(
                    "{}: was {}, is now {}",
                    safe(path),
                    state(was),
                    state(is)
                ));
            }
        }
        for (path, was) in &self.files {
            let is = now.files.get(path).and_then(Option::as_ref);
            let change = match (was, is) {
                (Some(_), None) => "deleted",
                (None, Some(_)) => "created",
                (Some(a), Some(b)) if a != b => "replaced",
                _ => continue,
            };
            diffs.push(format!("{}: {change}", safe(path)));
        }
        Ok(diffs)
    }

    /// Checks that an aborted attempt left the checkout as this snapshot found it.
    fn unchanged(&self, t: &Git, what: &str) -> Result<()> {
        let diffs = self.differences(t)?;
        if diffs.is_empty() {
            return Ok(());
        }
        bail!(
            "{what} was aborted, but {} is not as it was before:\n  {}\nsee `git status` there",
            safe_path(&t.dir),
            diffs.join("\n  ")
        )
    }
}

/// A status record for people.
fn state(record: Option<&String>) -> &'static str {
    let Some(record) = record else {
        return "clean or absent";
    };
    match record.split(' ').next() {
        Some("?") => "untracked",
        Some("!") => "ignored",
        Some("u") => "in conflict",
        _ if record
            .split(' ')
            .nth(1)
            .is_some_and(|xy| !xy.starts_with('.')) =>
        {
            "staged"
        }
        _ => "changed",
    }
}

fn file_id(path: &Path) -> Option<FileId> {
    let meta = fs::symlink_metadata(path).ok()?;
    Some(FileId {
        mode: meta.mode(),
        size: meta.size(),
        ino: meta.ino(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}

/// The daemon's lease on the repository: held while its connection is open.
struct RepoLease {
    _connection: grove_proto::Client,
    /// Where temporary worktrees go (under the worktree root).
    temp_dir: PathBuf,
}

impl RepoLease {
    fn take(repo: &Path) -> Result<RepoLease> {
        let mut connection = connect(&dirs()?)?;
        let lease = connection
            .call::<Lease>(&LeaseParams {
                repo: repo.to_path_buf(),
            })
            .with_context(|| format!("taking a lease on {} from the daemon", repo.display()))?;
        Ok(RepoLease {
            _connection: connection,
            temp_dir: lease.temp_dir,
        })
    }
}

/// The worktree where a branch is checked out, or a temporary one holding it.
struct Place {
    git: Git,
    temp: Option<TempWorktree>,
}

impl Place {
    fn new(
        repo: &Git,
        branch: &str,
        existing: Option<&Worktree>,
        id: &str,
        role: &str,
        lease: &RepoLease,
    ) -> Result<Place> {
        if let Some(wt) = existing {
            return Ok(Place {
                git: Git::new(&wt.path),
                temp: None,
            });
        }
        let temp = TempWorktree::add(
            repo,
            branch,
            &lease.temp_dir,
            &format!("merge-{}-{id}-{role}", std::process::id()),
        )?;
        Ok(Place {
            git: Git::new(&temp.path),
            temp: Some(temp),
        })
    }
}

struct TempWorktree {
    repo: Git,
    path: PathBuf,
}

impl TempWorktree {
    fn add(repo: &Git, branch: &str, parent: &Path, name: &str) -> Result<TempWorktree> {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        let path = parent.join(name);
        repo.run(&[
            OsStr::new("worktree"),
            OsStr::new("add"),
            OsStr::new("-q"),
            path.as_os_str(),
            OsStr::new(branch),
        ])
        .with_context(|| format!("checking out {branch} in a temporary worktree"))?;
        Ok(TempWorktree {
            repo: repo.clone(),
            path,
        })
    }
}

impl Drop for TempWorktree {
    fn drop(&mut self) {
        let _ = self.repo.output(&[
            OsStr::new("worktree"),
            OsStr::new("remove"),
            OsStr::new("--force"),
            self.path.as_os_str(),
        ]);
        if self.path.exists() {
            let _ = fs::remove_dir_all(&self.path);
            let _ = self.repo.output(&["worktree", "prune"]);
        }
    }
}

/// The trailer that leads from a commit grove made for an agent back to its record.
fn trailer(record: &AgentRecord) -> String {
    format!("Grove-Agent: {}", record.id)
}

/// "the agent NAME (ID)", or "the agent ID".
fn agent_words(record: &AgentRecord) -> String {
    match record.name.as_deref().filter(|n| *n != record.id) {
        Some(name) => format!("grove agent {name} ({})", record.id),
        None => format!("grove agent {}", record.id),
    }
}

fn merge(t: &Git, work: &Work, target: &str, was: &Snapshot) -> Result<Attempt> {
    let branch = &work.record.branch;
    let subject = format!(
        "Merge branch '{branch}' into {target} ({})",
        agent_words(&work.record)
    );
    let out = t.output(&[
        "merge",
        "--no-ff",
        "--no-edit",
        "-m",
        &subject,
        "-m",
        &trailer(&work.record),
        branch,
    ])?;
    if out.status.success() {
        return done(t, &was.head);
    }
    let files = t.unmerged_files()?;
    // Fails harmlessly when git stopped before starting the merge.
    let _ = t.output(&["merge", "--abort"]);
    was.unchanged(t, "the failed merge")?;
    if files.is_empty() {
        bail!("git merge failed; nothing was changed: {}", said(&out));
    }
    Ok(Attempt::Conflict(files))
}

fn squash(t: &Git, work: &Work, was: &Snapshot) -> Result<Attempt> {
    let before = &was.head;
    let branch = &work.record.branch;
    // `--ff` only so that a `merge.ff = false` in the config cannot reject `--squash`.
    let out = t.output(&["merge", "--squash", "--ff", branch])?;
    if !out.status.success() {
        let files = t.unmerged_files()?;
        // A squash leaves no MERGE_HEAD to abort; `reset --merge` is what `merge --abort`
        // does, and it keeps uncommitted changes the merge did not touch.
        t.run(&["reset", "--merge", "-q", "HEAD"])?;
        was.unchanged(t, "the failed squash")?;
        if files.is_empty() {
            bail!(
                "git merge --squash failed; nothing was changed: {}",
                said(&out)
            );
        }
        return Ok(Attempt::Conflict(files));
    }
    if t.output(&["diff", "--cached", "--quiet"])?.status.success() {
        return Ok(Attempt::UpToDate);
    }
    let subjects = t.run(&[
        "log",
        "--reverse",
        "--format=* %s",
        &format!("{before}..{}", work.tip),
    ])?;
    let mut args = vec![
        "commit".to_string(),
        "-q".into(),
        "-m".into(),
        format!(
            "Squash-merge branch '{branch}' ({})",
            agent_words(&work.record)
        ),
    ];
    if !subjects.trim().is_empty() {
        args.extend(["-m".into(), subjects.trim().to_string()]);
    }
    args.extend(["-m".into(), trailer(&work.record)]);
    let out = t.output(&args)?;
    if !out.status.success() {
        t.run(&["reset", "--merge", "-q", "HEAD"])?;
        was.unchanged(t, "the squash whose commit failed")?;
        bail!("git commit failed; nothing was changed: {}", said(&out));
    }
    done(t, before)
}

/// Rebases the agent's branch onto the target in `a`, then fast-forwards the target in `t`.
fn rebase(
    t: &Git,
    a: &Git,
    work: &Work,
    target: &str,
    was: &Snapshot,
    agent_was: &Snapshot,
) -> Result<Attempt> {
    let branch = &work.record.branch;
    let out = a.output(&["rebase", &format!("refs/heads/{target}")])?;
    if !out.status.success() {
        let files = a.unmerged_files()?;
        let _ = a.output(&["rebase", "--abort"]);
        if a.branch_tip(branch)?.as_deref() != Some(work.tip.as_str()) {
            bail!(
                "git rebase stopped and could not be undone; see `git status` in {}",
                safe_path(&a.dir)
            );
        }
        agent_was.unchanged(a, "the failed rebase")?;
        if files.is_empty() {
            bail!("git rebase failed; nothing was changed: {}", said(&out));
        }
        return Ok(Attempt::Conflict(files));
    }
    let out = t.output(&["merge", "--ff-only", branch])?;
    if !out.status.success() {
        // A merge that failed changes nothing, the agent's branch included; `--keep`
        // rather than `--hard` so that nothing uncommitted is overwritten.
        a.run(&["reset", "--keep", "-q", &work.tip])?;
        agent_was.unchanged(a, "the rebase whose fast-forward failed")?;
        was.unchanged(t, "the fast-forward that failed")?;
        bail!(
            "fast-forwarding {target} failed; nothing was changed: {}",
            said(&out)
        );
    }
    done(t, &was.head)
}

fn done(t: &Git, before: &str) -> Result<Attempt> {
    let head = t.head()?;
    Ok(if head == before {
        Attempt::UpToDate
    } else {
        Attempt::Merged(head)
    })
}

/// For each conflicting file, the other grove branches that changed it: those already in
/// the target (the likely other side of the conflict) and the live or unmerged ones.
fn blame(
    git: &Git,
    files: &[String],
    work: &Work,
    target: &str,
    before: &str,
    others: Vec<AgentRecord>,
) -> Result<Vec<Conflict>> {
    let fork = git
        .merge_base(before, &work.tip)?
        .unwrap_or_else(|| work.merge_base.clone());
    let mut relevant = Vec::new();
    for o in works(others)? {
        let in_target = git.is_ancestor(&o.tip, before)?;
        if in_target || o.live() || !o.merged() {
            let state = if in_target {
                format!("merged into {target}")
            } else {
                o.state().to_string()
            };
            relevant.push((o, state));
        }
    }
    let mut conflicts = Vec::new();
    for path in files {
        let mut also = Vec::new();
        for (o, state) in &relevant {
            let touched = git.run(&["rev-list", "-n1", &o.tip, &format!("^{fork}"), "--", path])?;
            if !touched.trim().is_empty() {
                also.push(Other {
                    id: o.record.id.clone(),
                    branch: o.record.branch.clone(),
                    state: state.clone(),
                });
            }
        }
        conflicts.push(Conflict {
            path: path.clone(),
            also_changed_by: also,
        });
    }
    Ok(conflicts)
}

fn conflict_text(r: &Report) -> String {
    let how = match r.mode {
        "rebase" => format!("rebasing {} onto {}", safe(&r.branch), safe(&r.target)),
        _ => format!("merging {} into {}", safe(&r.branch), safe(&r.target)),
    };
    let mut text = format!(
        "grove: {how} stopped on conflicts; it was aborted and nothing was changed\nconflicting files:\n"
    );
    for c in &r.conflicts {
        let others = c
            .also_changed_by
            .iter()
            .map(|o| {
                format!(
                    "{} ({}, agent {})",
                    safe(&o.branch),
                    safe(&o.state),
                    safe(&o.id)
                )
            })
            .collect::<Vec<_>>();
        if others.is_empty() {
            text.push_str(&format!("  {}\n", safe(&c.path)));
        } else {
            text.push_str(&format!(
                "  {}  also changed by {}\n",
                safe(&c.path),
                others.join(", ")
            ));
        }
    }
    text.push_str(&format!(
        "hint: `grove overlaps --hunks` shows where branches collide; resolve by hand with \
         `git merge {}` in a clean checkout of {}\n",
        safe(&r.branch),
        safe(&r.target)
    ));
    text
}

fn success_text(r: &Report) -> String {
    let at = |c: &Option<String>| c.as_deref().map(short).unwrap_or_default();
    let (branch, target, id) = (safe(&r.branch), safe(&r.target), safe(&r.id));
    let place = if r.temporary {
        " (in a temporary worktree, now removed)".to_string()
    } else {
        String::new()
    };
    let deleted = match r.deleted.as_deref() {
        Some("deleted") => format!("deleted {branch}\n"),
        Some(why) => format!("{}\n", safe(why)),
        None => String::new(),
    };
    let mut text = match (r.result, r.mode) {
        ("up_to_date", _) => {
            format!("{target} already has everything on {branch}; nothing to do\n")
        }
        (_, "squash") if r.deleted.is_some() => format!(
            "squashed {branch} into one commit {} on {target}{place}\n",
            at(&r.commit),
        ),
        (_, "squash") => format!(
            "squashed {branch} into one commit {} on {target}{place}\n\
             the branch is kept; `grove discard {id}` deletes it\n",
            at(&r.commit),
        ),
        (_, "rebase") => format!(
            "rebased {branch} onto {target} and fast-forwarded {target} to {}{place}\n",
            at(&r.commit)
        ),
        _ => format!(
            "merged {branch} into {target}: merge commit {}{place}\n",
            at(&r.commit)
        ),
    };
    text.push_str(&deleted);
    if r.order.is_empty() {
        text.push_str("no other unmerged agent branches in this repository\n");
        return text;
    }
    text.push_str("suggested order for the remaining unmerged branches (fewest overlaps first):\n");
    for (n, next) in r.order.iter().enumerate() {
        let mut overlaps = match next.overlaps {
            0 => "no overlaps".to_string(),
            1 => "shares files with 1 other branch".to_string(),
            k => format!("shares files with {k} other branches"),
        };
        if next.base_changed_files > 0 {
            overlaps.push_str(&format!(
                ", {} of its files changed on its base since it forked",
                next.base_changed_files
            ));
        }
        text.push_str(&format!(
            "  {}. grove merge {}   # {}, {overlaps}\n",
            n + 1,
            safe(&next.id),
            safe(&next.branch)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_merge_writes_is_in_the_way() {
        let root = std::env::temp_dir().join(format!("grove-merge-way-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("ignored-dir/sub")).expect("mkdir");
        fs::write(root.join("ignored-dir/sub/old"), "").expect("write");
        fs::write(root.join("plain"), "").expect("write");
        let writes: BTreeSet<String> = [
            "a.out",
            "ignored-dir/sub/old",
            "ignored-dir/new",
            "plain/child",
            "lib",
        ]
        .map(String::from)
        .into();
        let way = |p: &str| in_the_way(&root, p, &writes);
        assert!(way("a.out"), "the same path");
        assert!(
            way("ignored-dir/"),
            "a directory holding a file the merge writes"
        );
        assert!(way("plain"), "a file where the merge needs a directory");
        assert!(way("lib/"), "a directory where the merge writes a file");
        assert!(
            way("lib/deep/x.o"),
            "inside a path the merge writes as a file"
        );
        assert!(!way("other.out"));
        assert!(!way("ignored-dir-2/"));
        let missing_only: BTreeSet<String> = ["ignored-dir/new".to_string()].into();
        assert!(
            !in_the_way(&root, "ignored-dir/", &missing_only),
            "a new file in an untracked directory overwrites nothing"
        );
        let _ = fs::remove_dir_all(&root);
    }
}

//! `grove merge`: an agent's branch into a target branch, with git's own machinery so
//! that hooks, merge drivers and config apply. Either it succeeds, or the repository is
//! left exactly as it was: HEAD, index, working tree and the agent's branch.

use crate::commands::overlaps::{candidates, ChangeCache, Radar};
use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use crate::gitcli::{said, same_path, short, works, Git, Work, Worktree};
use crate::output::print_json;
use anyhow::{bail, Context, Result};
use grove_proto::methods::{Get, IdParams};
use grove_proto::types::AgentRecord;
use serde::Serialize;
use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;
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

pub fn run(id: &str, mode: Mode, into: Option<String>, json: bool) -> Result<ExitCode> {
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

    // Every check before the first change: a refusal leaves everything as it was.
    let checked_out = |name: &str| worktrees.iter().find(|w| w.branch.as_deref() == Some(name));
    let target_wt = checked_out(&target);
    if let Some(wt) = target_wt {
        usable(wt, &target)?;
    }
    let agent_wt = match mode {
        Mode::Rebase => checked_out(&branch),
        _ => None,
    };
    if let Some(wt) = agent_wt {
        usable(wt, &branch)?;
    }

    // A target checked out nowhere gets a temporary worktree rather than a refusal: git
    // needs a working tree to merge in, and borrowing one of the user's checkouts would
    // switch its branch and rewrite its files under them.
    let target_place = Place::new(&git, &target, target_wt, &id, "target")?;
    if !json {
        match target_wt {
            Some(wt) if Some(&wt.path) != main.as_ref() => eprintln!(
                "note: {target} is checked out in {}; merging there",
                wt.path.display()
            ),
            None => eprintln!(
                "note: {target} is not checked out anywhere; merging in a temporary worktree, removed afterwards"
            ),
            _ => {}
        }
    }
    let t = &target_place.git;
    let attempt = match mode {
        Mode::Merge => merge(t, &branch, &before)?,
        Mode::Squash => squash(t, &work, &before)?,
        Mode::Rebase => {
            let agent_place = Place::new(&git, &branch, agent_wt, &id, "agent")?;
            if let (Some(wt), false) = (agent_wt, json) {
                eprintln!(
                    "note: {branch} is checked out in {}; rebasing it there",
                    wt.path.display()
                );
            }
            rebase(t, &agent_place.git, &work, &target, &before)?
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
    };
    drop(target_place);
    let others: Vec<AgentRecord> = crate::connect::list_agents(&mut client, true)?
        .into_iter()
        .filter(|r| r.id != id && same_path(&r.repo, &work.record.repo))
        .collect();
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
    let mut cache = ChangeCache::open()?;
    let radar = Radar::new(candidates(others)?, &mut cache)?;
    cache.save(false);
    report.order = radar
        .merge_order()
        .into_iter()
        .map(|(i, overlaps, base_changed_files)| Next {
            id: radar.works[i].record.id.clone(),
            branch: radar.works[i].record.branch.clone(),
            overlaps,
            base_changed_files,
        })
        .collect();
    if json {
        print_json(&report)?;
    } else {
        print!("{}", success_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn usage(message: String) -> anyhow::Error {
    UsageError(message).into()
}

/// A worktree git may merge in: clean, and not held by a running agent.
fn usable(wt: &Worktree, branch: &str) -> Result<()> {
    let path = wt.path.display();
    if let Some(reason) = &wt.locked {
        return Err(usage(format!(
            "{branch} is checked out in {path}, which is locked ({reason}); \
             nothing was changed"
        )));
    }
    let status = Git::new(&wt.path)
        .status()
        .with_context(|| format!("checking {path}"))?;
    if !status.is_empty() {
        let lines: Vec<&str> = status.lines().collect();
        let shown = lines
            .iter()
            .take(10)
            .map(|l| format!("\n  {l}"))
            .collect::<String>();
        let more = if lines.len() > 10 {
            format!("\n  ... and {} more", lines.len() - 10)
        } else {
            String::new()
        };
        return Err(usage(format!(
            "refusing to merge: {path} (where {branch} is checked out) has uncommitted changes \
             or untracked files:{shown}{more}\ncommit, stash or remove them first; nothing was changed"
        )));
    }
    Ok(())
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
    fn add(repo: &Git, branch: &str, name: &str) -> Result<TempWorktree> {
        let parent = dirs()?.state_dir.join("tmp");
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
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

fn merge(t: &Git, branch: &str, before: &str) -> Result<Attempt> {
    let out = t.output(&["merge", "--no-ff", "--no-edit", branch])?;
    if out.status.success() {
        return done(t, before);
    }
    let files = t.unmerged_files()?;
    // Fails harmlessly when git stopped before starting the merge.
    let _ = t.output(&["merge", "--abort"]);
    restored(t, before)?;
    if files.is_empty() {
        bail!("git merge failed; nothing was changed: {}", said(&out));
    }
    Ok(Attempt::Conflict(files))
}

fn squash(t: &Git, work: &Work, before: &str) -> Result<Attempt> {
    let branch = &work.record.branch;
    // `--ff` only so that a `merge.ff = false` in the config cannot reject `--squash`.
    let out = t.output(&["merge", "--squash", "--ff", branch])?;
    if !out.status.success() {
        let files = t.unmerged_files()?;
        // A squash leaves no MERGE_HEAD to abort; the checkout was clean, so a hard reset
        // returns exactly to it.
        t.run(&["reset", "--hard", "-q", "HEAD"])?;
        restored(t, before)?;
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
            "Squash-merge branch '{branch}' (grove agent {})",
            work.record.id
        ),
    ];
    if !subjects.trim().is_empty() {
        args.extend(["-m".into(), subjects.trim().to_string()]);
    }
    let out = t.output(&args)?;
    if !out.status.success() {
        t.run(&["reset", "--hard", "-q", "HEAD"])?;
        restored(t, before)?;
        bail!("git commit failed; nothing was changed: {}", said(&out));
    }
    done(t, before)
}

/// Rebases the agent's branch onto the target in `a`, then fast-forwards the target in `t`.
fn rebase(t: &Git, a: &Git, work: &Work, target: &str, before: &str) -> Result<Attempt> {
    let branch = &work.record.branch;
    let out = a.output(&["rebase", &format!("refs/heads/{target}")])?;
    if !out.status.success() {
        let files = a.unmerged_files()?;
        let _ = a.output(&["rebase", "--abort"]);
        if a.branch_tip(branch)?.as_deref() != Some(work.tip.as_str()) || !a.status()?.is_empty() {
            bail!(
                "git rebase stopped and could not be undone; see `git status` in {}",
                a.dir.display()
            );
        }
        if files.is_empty() {
            bail!("git rebase failed; nothing was changed: {}", said(&out));
        }
        return Ok(Attempt::Conflict(files));
    }
    let out = t.output(&["merge", "--ff-only", branch])?;
    if !out.status.success() {
        // A merge that failed changes nothing, the agent's branch included.
        a.run(&["reset", "--hard", "-q", &work.tip])?;
        restored(t, before)?;
        bail!(
            "fast-forwarding {target} failed; nothing was changed: {}",
            said(&out)
        );
    }
    done(t, before)
}

fn done(t: &Git, before: &str) -> Result<Attempt> {
    let head = t.head()?;
    Ok(if head == before {
        Attempt::UpToDate
    } else {
        Attempt::Merged(head)
    })
}

/// Checks that an aborted attempt left the checkout as it found it.
fn restored(t: &Git, before: &str) -> Result<()> {
    if t.head()? != before || !t.status()?.is_empty() {
        bail!(
            "git could not undo the failed merge; see `git status` in {}",
            t.dir.display()
        );
    }
    Ok(())
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
        "rebase" => format!("rebasing {} onto {}", r.branch, r.target),
        _ => format!("merging {} into {}", r.branch, r.target),
    };
    let mut text = format!(
        "grove: {how} stopped on conflicts; it was aborted and nothing was changed\nconflicting files:\n"
    );
    for c in &r.conflicts {
        let others = c
            .also_changed_by
            .iter()
            .map(|o| format!("{} ({}, agent {})", o.branch, o.state, o.id))
            .collect::<Vec<_>>();
        if others.is_empty() {
            text.push_str(&format!("  {}\n", c.path));
        } else {
            text.push_str(&format!(
                "  {}  also changed by {}\n",
                c.path,
                others.join(", ")
            ));
        }
    }
    text.push_str(&format!(
        "hint: `grove overlaps --hunks` shows where branches collide; resolve by hand with \
         `git merge {}` in a clean checkout of {}\n",
        r.branch, r.target
    ));
    text
}

fn success_text(r: &Report) -> String {
    let at = |c: &Option<String>| c.as_deref().map(short).unwrap_or_default();
    let place = if r.temporary {
        " (in a temporary worktree, now removed)".to_string()
    } else {
        String::new()
    };
    let mut text = match (r.result, r.mode) {
        ("up_to_date", _) => format!(
            "{} already has everything on {}; nothing to do\n",
            r.target, r.branch
        ),
        (_, "squash") => format!(
            "squashed {} into one commit {} on {}{place}\n\
             the branch is kept; `grove discard {}` deletes it\n",
            r.branch,
            at(&r.commit),
            r.target,
            r.id
        ),
        (_, "rebase") => format!(
            "rebased {} onto {} and fast-forwarded {} to {}{place}\n",
            r.branch,
            r.target,
            r.target,
            at(&r.commit)
        ),
        _ => format!(
            "merged {} into {}: merge commit {}{place}\n",
            r.branch,
            r.target,
            at(&r.commit)
        ),
    };
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
            next.id,
            next.branch
        ));
    }
    text
}

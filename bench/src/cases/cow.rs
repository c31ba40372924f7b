//! Case 15: twenty worktrees of the big repository on each filesystem (loop-mounted XFS
//! with reflink and btrfs, where grove clones its template of the base, and ext4, where
//! it checks out as git does): the disk they take, by `df` after a sync, in checkouts of
//! `git worktree add`, and how long each spawn takes to the agent's first log line,
//! against `git worktree add -b` and `cp -r` of a checkout onto the same filesystem.

use super::Ctx;
use crate::grove::{field, poll_until, timed};
use crate::loopfs::{missing, Kind, LoopFs};
use crate::report::{Goal, Metric, Row};
use crate::repos::Repo;
use crate::stats::{ms, Summary};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const WORKTREES: usize = 20;

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for kind in [Kind::Xfs, Kind::Btrfs, Kind::Ext4] {
        let what = format!("{WORKTREES} worktrees on {}", kind.name());
        if let Some(why) = missing(kind) {
            rows.push(Row::not_available("15", what, why));
            continue;
        }
        match ctx.repos.big().and_then(|repo| on(ctx, repo, kind)) {
            Ok(found) => rows.extend(found),
            Err(e) => rows.push(Row::not_available("15", what, format!("error: {e:#}"))),
        }
    }
    Ok(rows)
}

/// Big enough that twenty full checkouts (ext4) stay far below the daemon's disk
/// pressure mark: about 8 KiB of blocks per file of the big repository.
fn image_gib(repo: &Repo) -> u64 {
    let checkout = repo.spec.bytes + repo.spec.files as u64 * 8192;
    (checkout * (WORKTREES as u64 + 2) * 2)
        .div_ceil(1 << 30)
        .max(2)
}

/// What git and cp measured on one filesystem.
struct Baselines {
    /// `git worktree add -b` of each of the twenty, in ms.
    git_add: Vec<f64>,
    /// `cp -r` of a checkout, in ms.
    cp: Vec<f64>,
    /// Bytes one `git worktree add` took, and twenty.
    one_checkout: u64,
    twenty_checkouts: u64,
}

fn on(ctx: &Ctx<'_>, repo: &Repo, kind: Kind) -> Result<Vec<Row>> {
    let mount = ctx.env.root.join(format!("fs-{}", kind.name()));
    let fs = LoopFs::mount(kind, &mount, image_gib(repo))?;
    let measured = measure(ctx, repo, kind, &fs);
    // Whatever happened, no agent or daemon holds the filesystem when it is unmounted.
    let reset = ctx.env.set_worktree_root(None);
    measured.and_then(|rows| reset.map(|()| rows))
}

fn measure(ctx: &Ctx<'_>, repo: &Repo, kind: Kind, fs: &LoopFs) -> Result<Vec<Row>> {
    let git = baselines(ctx, repo, fs, kind)?;
    ctx.env.set_worktree_root(Some(fs.path.join("grove")))?;
    let before = fs.used_bytes()?;
    let (first, spawns, cloned) = grove_spawns(ctx, repo, kind.clones().then_some(fs))?;
    let used = fs.used_bytes()?.saturating_sub(before);
    let fs_name = kind.name();
    let checkouts = |bytes: u64| bytes as f64 / git.one_checkout as f64;
    let spawn_note = format!(
        "{cloned} of {WORKTREES} worktrees cloned; the first spawn, {:.0} ms, checked out \
         its base{}; the figure is the other {}{}",
        ms(first),
        if kind.clones() {
            " and made the template"
        } else {
            ""
        },
        WORKTREES - 1,
        if kind.clones() {
            ", spawned once the template was made"
        } else {
            ""
        }
    );
    let mut spawn = Row::new("15", format!("spawn on {fs_name}, {}", repo.label()), "ms")
        .grove(Summary::of(&spawns))
        .baseline("git worktree add -b", Summary::of(&git.git_add))
        .note(spawn_note);
    let cp = Row::new("15", format!("spawn on {fs_name} against cp -r"), "ms")
        .grove(Summary::of(&spawns))
        .baseline("cp -r of a checkout", Summary::of(&git.cp))
        .note("GNU cp 9 clones where the filesystem can (--reflink=auto)");
    let mut disk = Row::new(
        "15",
        format!("disk of {WORKTREES} worktrees on {fs_name}"),
        "checkouts",
    )
    .grove(Some(Summary::single(checkouts(used))))
    .baseline(
        format!("{WORKTREES} × git worktree add"),
        Some(Summary::single(checkouts(git.twenty_checkouts))),
    )
    .note(format!(
        "df after sync -f; one checkout (git worktree add) took {:.1} MiB; grove's \
         {WORKTREES} (with the template) {:.1} MiB",
        git.one_checkout as f64 / f64::from(1 << 20),
        used as f64 / f64::from(1 << 20)
    ));
    if kind.clones() {
        spawn = spawn.goal(Goal::at_most(Metric::Ratio, 0.2));
        disk = disk.goal(Goal::at_most(Metric::Median, 1.2));
    }
    Ok(vec![disk, spawn, cp])
}

/// Twenty `git worktree add -b` onto the filesystem (timed; disk measured after the
/// first and the last), then `cp -r` of the first (timed, each removed); all removed.
fn baselines(ctx: &Ctx<'_>, repo: &Repo, fs: &LoopFs, kind: Kind) -> Result<Baselines> {
    let env = ctx.env;
    let dir = fs.path.join("git");
    let start = fs.used_bytes()?;
    let (mut git_add, mut one_checkout) = (Vec::new(), 0);
    let mut made = Vec::new();
    for run in 0..WORKTREES {
        let (path, branch) = (
            dir.join(run.to_string()),
            format!("bench/cow-{}-{run}", kind.name()),
        );
        let took = timed(
            env.git_command(&repo.path)
                .args(["worktree", "add", "-b", &branch])
                .arg(&path),
        )?;
        git_add.push(ms(took));
        made.push((path, branch));
        if run == 0 {
            one_checkout = fs.used_bytes()?.saturating_sub(start);
        }
    }
    let twenty_checkouts = fs.used_bytes()?.saturating_sub(start);
    let mut cp = Vec::new();
    for run in 0..=ctx.runs {
        let copy = fs.path.join(format!("cp-{run}"));
        let took = timed(Command::new("cp").arg("-r").arg(&made[0].0).arg(&copy))?;
        if run > 0 {
            cp.push(ms(took));
        }
        std::fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    for (path, branch) in &made {
        env.git(
            &repo.path,
            &["worktree", "remove", "--force", &path.to_string_lossy()],
        )?;
        env.git(&repo.path, &["branch", "-D", branch])?;
    }
    anyhow::ensure!(one_checkout > 0, "df saw no space taken by a checkout");
    Ok(Baselines {
        git_add,
        cp,
        one_checkout,
        twenty_checkouts,
    })
}

/// Twenty agents spawned one after the other, each timed to its first log line and
/// left running: how long the first took, the others' times in ms, and how many of the
/// twenty say their worktree was cloned.
fn grove_spawns(
    ctx: &Ctx<'_>,
    repo: &Repo,
    template_on: Option<&LoopFs>,
) -> Result<(Duration, Vec<f64>, usize)> {
    let env = ctx.env;
    let (mut first, mut rest, mut ids) = (Duration::ZERO, Vec::new(), Vec::new());
    for run in 0..WORKTREES {
        let (took, id) = spawn_to_first_line(ctx, &repo.path)?;
        if run == 0 {
            first = took;
            // The template is made in the background after the first checkout: the
            // others are measured once it is there, as every spawn after the first
            // minutes of a base would find it.
            if let Some(fs) = template_on {
                poll_until(
                    "the base's template",
                    Duration::from_secs(600),
                    Duration::from_millis(10),
                    || Ok(template_made(&fs.path.join("grove"))),
                )?;
            }
        } else {
            rest.push(ms(took));
        }
        ids.push(id);
    }
    let list = env.grove_json(&env.root, &["list"])?;
    let cloned = list["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            a["id"]
                .as_str()
                .is_some_and(|id| ids.iter().any(|i| i == id))
        })
        .filter(|a| a["cloned"] == true)
        .count();
    Ok((first, rest, cloned))
}

fn spawn_to_first_line(ctx: &Ctx<'_>, repo: &Path) -> Result<(Duration, String)> {
    let start = Instant::now();
    let record = ctx
        .env
        .spawn(repo, &["sh", "-c", "echo started; sleep 3600"])?;
    let log = PathBuf::from(field(&record, "log_path")?);
    let seen = poll_until(
        "the agent's first log line",
        Duration::from_secs(600),
        Duration::from_micros(250),
        || Ok(std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)),
    )?;
    Ok((seen - start, field(&record, "id")?.to_string()))
}

/// Whether a template is among the worktrees under `root` (its directory is placed
/// after its index).
fn template_made(root: &Path) -> bool {
    let dirs = std::fs::read_dir(root).into_iter().flatten().flatten();
    dirs.flat_map(|repo| {
        std::fs::read_dir(repo.path())
            .into_iter()
            .flatten()
            .flatten()
    })
    .any(|entry| {
        let template = entry
            .file_name()
            .to_string_lossy()
            .starts_with(".grove-template-");
        template && entry.file_type().is_ok_and(|t| t.is_dir())
    })
}

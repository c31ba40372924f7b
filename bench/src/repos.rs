//! The repositories the cases run against, generated on first use: deterministic
//! pseudo-random text files, written in parallel, then one `git add` and one commit,
//! packed like a clone would be.

use crate::grove::Env;
use crate::stats::Rng;
use anyhow::{Context, Result};
use std::cell::OnceCell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub files: usize,
    pub dirs: usize,
    pub bytes: u64,
}

/// `files` text files over `dirs` directories, `bytes` in all.
const fn spec(name: &'static str, files: usize, dirs: usize, bytes: u64) -> Spec {
    Spec {
        name,
        files,
        dirs,
        bytes,
    }
}

pub const SMALL: Spec = spec("small", 500, 25, 3_000_000);
pub const BIG: Spec = spec("big", 50_000, 2_000, 300_000_000);
pub const BIG_QUICK: Spec = spec("big", 5_000, 200, 30_000_000);
/// 5,000 files: the worktree a checkpoint's code is recorded from (case 5).
pub const MEDIUM: Spec = spec("medium", 5_000, 200, 30_000_000);
/// One file: for making many agent records quickly.
pub const TINY: Spec = spec("tiny", 1, 1, 100);

#[derive(Debug)]
pub struct Repo {
    pub path: PathBuf,
    pub spec: Spec,
    /// A tracked file (relative to the repository root) that cases may change.
    pub sample_file: String,
}

impl Repo {
    /// "big (50000 files, 300 MB)".
    pub fn label(&self) -> String {
        format!(
            "{} repo ({} files, {} MB)",
            self.spec.name,
            self.spec.files,
            self.spec.bytes / 1_000_000
        )
    }
}

/// The repositories of one run, each generated when a case first asks for it.
pub struct Repos<'a> {
    env: &'a Env,
    quick: bool,
    small: OnceCell<Repo>,
    big: OnceCell<Repo>,
    medium: OnceCell<Repo>,
    tiny: OnceCell<Repo>,
}

impl<'a> Repos<'a> {
    pub fn new(env: &'a Env, quick: bool) -> Repos<'a> {
        Repos {
            env,
            quick,
            small: OnceCell::new(),
            big: OnceCell::new(),
            medium: OnceCell::new(),
            tiny: OnceCell::new(),
        }
    }

    pub fn small(&self) -> Result<&Repo> {
        self.get(&self.small, SMALL)
    }

    pub fn big(&self) -> Result<&Repo> {
        self.get(&self.big, if self.quick { BIG_QUICK } else { BIG })
    }

    pub fn medium(&self) -> Result<&Repo> {
        self.get(&self.medium, MEDIUM)
    }

    pub fn tiny(&self) -> Result<&Repo> {
        self.get(&self.tiny, TINY)
    }

    fn get<'c>(&self, cell: &'c OnceCell<Repo>, spec: Spec) -> Result<&'c Repo> {
        if let Some(repo) = cell.get() {
            return Ok(repo);
        }
        let repo = generate(self.env, &self.env.root.join("repos"), spec)?;
        Ok(cell.get_or_init(|| repo))
    }
}

fn dir_of(spec: &Spec, file: usize) -> String {
    let dir = file % spec.dirs;
    format!("d{:03}/s{:03}", dir / 100, dir % 100)
}

fn file_path(spec: &Spec, file: usize) -> String {
    format!("{}/f{file:05}.txt", dir_of(spec, file))
}

const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "self",
    "return",
    "match",
    "struct",
    "impl",
    "worktree",
    "branch",
    "agent",
    "commit",
    "daemon",
    "state",
    "reducer",
    "channel",
    "checkpoint",
    "salvage",
    "socket",
    "queue",
    "record",
    "value",
    "error",
    "result",
    "option",
    "some",
    "none",
    "ok",
    "config",
    "path",
    "file",
    "index",
    "tree",
    "blob",
    "object",
    "pack",
    "delta",
    "hash",
    "merge",
    "rebase",
    "status",
    "diff",
    "log",
    "show",
    "list",
    "spawn",
    "kill",
    "wait",
    "{",
    "}",
    "(",
    ")",
    "=",
    "=>",
    "->",
    "::",
    "0",
    "1",
    "42",
    "1024",
    "//",
    "#",
];

/// The text of file `index`: the same bytes on every machine.
pub fn content(spec: &Spec, index: usize) -> String {
    let mut rng = Rng::new(0x6772_6f76_6500_0000 ^ index as u64);
    let average = (spec.bytes / spec.files as u64).max(16);
    let size = rng.range(average / 2, average * 3 / 2) as usize;
    let mut text = String::with_capacity(size + 80);
    let _ = writeln!(text, "// {} file {index}", spec.name);
    while text.len() < size {
        let words = rng.range(4, 14);
        for i in 0..words {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(WORDS[rng.range(0, WORDS.len() as u64 - 1) as usize]);
        }
        text.push('\n');
    }
    text
}

fn write_files(root: &Path, spec: &Spec) -> Result<()> {
    for dir in 0..spec.dirs.min(spec.files) {
        let path = root.join(dir_of(spec, dir));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Result<()> {
                    for index in (t..spec.files).step_by(threads) {
                        let path = root.join(file_path(spec, index));
                        std::fs::write(&path, content(spec, index))
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a file-writing thread panicked"))
    })
}

/// Generates the repository `spec` under `parent`; says on stderr how long it took.
pub fn generate(env: &Env, parent: &Path, spec: Spec) -> Result<Repo> {
    let path = parent.join(spec.name);
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    eprint!(
        "grove-bench: generating the {} repo ({} files in {} dirs, ~{} MB)...",
        spec.name,
        spec.files,
        spec.dirs,
        spec.bytes / 1_000_000
    );
    let start = Instant::now();
    write_files(&path, &spec)?;
    let written = start.elapsed();
    env.git(&path, &["init", "-q", "-b", "main"])?;
    // No automatic gc in the background while we measure.
    env.git(&path, &["config", "gc.auto", "0"])?;
    env.git(&path, &["config", "maintenance.auto", "false"])?;
    env.git(&path, &["add", "-A"])?;
    let message = format!("generated: {} files", spec.files);
    env.git(&path, &["commit", "-q", "-m", &message])?;
    // One pack, as after a clone; no delta search, which would only cost time here.
    env.git(&path, &["repack", "-a", "-d", "-q", "--window=0"])?;
    eprintln!(
        " {:.1}s (files {:.1}s, git {:.1}s)",
        start.elapsed().as_secs_f64(),
        written.as_secs_f64(),
        (start.elapsed() - written).as_secs_f64()
    );
    Ok(Repo {
        path,
        spec,
        sample_file: file_path(&spec, 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic_and_near_the_average_size() {
        assert_eq!(content(&BIG, 7), content(&BIG, 7));
        assert_ne!(content(&BIG, 7), content(&BIG, 8));
        let total: usize = (0..200).map(|i| content(&BIG, i).len()).sum();
        let average = total / 200;
        assert!((5_000..7_000).contains(&average), "{average}");
    }

    #[test]
    fn files_spread_over_the_dirs() {
        assert_eq!(file_path(&BIG, 0), "d000/s000/f00000.txt");
        assert_eq!(file_path(&BIG, 1999), "d019/s099/f01999.txt");
        assert_eq!(file_path(&BIG, 2000), "d000/s000/f02000.txt");
    }
}

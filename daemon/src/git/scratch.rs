//! Salvage that trusts nothing the agent wrote: what a worktree holds is staged in a
//! scratch repository grove makes for the occasion (its own config, index and refs; the
//! agent's and the user's objects borrowed through alternates), and brought into the
//! user's repository with one hardened `git fetch`. No config, hook, index, attribute
//! driver or ref of the agent's is ever used by a git grove runs.

use super::hardened_git;
use crate::error::Error;
use git2::Oid;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Nested repositories inside nested repositories, at most this deep.
const MAX_NESTING: usize = 8;

/// An index file up to this size (about 20,000 entries) is read and written by libgit2
/// in the daemon, for a few MiB of heap while it takes, instead of by one git process
/// per step: each process costs milliseconds, and each that writes the index hashes
/// again every file whose mtime falls in the second the index was written (git's racy
/// check, to the second), which is every file of a worktree collected within a second
/// of its checkout. A larger index stays with git processes, whose memory goes when
/// they exit (libgit2's `add_all` over 50,000 files held 36 MiB of the daemon's heap).
const IN_PROCESS_INDEX_BYTES: u64 = 2 << 20;

/// The scratch repository's config. Not bare: the work tree is given each time
/// (GIT_WORK_TREE, or libgit2's workdir). Hardened git reads no global or system
/// config; libgit2 reads them, so what they could change of what is staged is pinned
/// here, where the repository's own config wins (the user's excludes are copied in by
/// `exclude_as`).
const SCRATCH_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\t\
    logAllRefUpdates = false\n\tautocrlf = false\n\tsafecrlf = false\n\tfilemode = true\n\t\
    symlinks = true\n\tignorecase = false\n\tattributesFile = /dev/null\n\t\
    excludesFile = /dev/null\n";

/// git's assume-unchanged bit of an index entry (CE_VALID).
const ASSUME_UNCHANGED: u16 = 0x8000;

/// What staging in process made: the tree, the nested repositories it left, and the
/// staged index (in memory).
struct InProcess {
    tree: Oid,
    nested: Vec<String>,
    index: git2::Index,
}

/// A scratch repository's directory, removed when dropped: what a collect still needs
/// of its salvage once libgit2's handles on it are closed (`Scratch::into_dir`).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The index `stage` left for the worktree itself (its first).
    pub fn top_index(&self) -> PathBuf {
        self.0.join("index-0")
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A bare repository of grove's own, removed when dropped.
pub struct Scratch {
    dir: ScratchDir,
    /// libgit2's handle on it, opened once for every step of a salvage.
    repo: git2::Repository,
    /// libgit2's handle on where new objects go, opened when first needed.
    objects: std::cell::OnceCell<git2::Repository>,
    indexes: std::cell::Cell<usize>,
    /// Where new objects go when not into the scratch repository itself.
    write_to: Option<PathBuf>,
}

/// What staging a worktree produced.
pub struct Staged {
    /// The commit holding the worktree on top of the tip; `None` when it held nothing new.
    pub commit: Option<Oid>,
    /// Paths (relative to the worktree) left out because they are over the size cap.
    pub left_out: Vec<String>,
}

/// How one worktree is staged.
pub struct Stage<'a> {
    pub worktree: &'a Path,
    pub tip: Oid,
    /// Paths grove placed (setup copies and links): never salvaged.
    pub placed: &'a [String],
    /// Cone-mode directories of a sparse checkout (empty: the whole tree).
    pub sparse: &'a [String],
    pub max_file: u64,
    /// An index whose cached file stats spare hashing unchanged files (a linked
    /// worktree's own, verified); without one every file is hashed.
    pub index_seed: Option<&'a Path>,
    /// Author, committer and message of the salvage commit.
    pub authorship: &'a super::authorship::Authorship,
    /// Author and committer time (seconds): the same job makes the same commit, so a
    /// collect that a crash interrupted and that runs again changes nothing.
    pub time_s: u64,
    /// The worktree stays: `top_index` must hold the staged index, which becomes its
    /// own. Otherwise an index staged by libgit2 is not written out unless a later git
    /// step reads it.
    pub keep_index: bool,
}

impl Scratch {
    /// A fresh scratch repository at `dir` that reads objects from `objects`, and
    /// writes new ones to `write_to` when given (a linked worktree's salvage goes
    /// straight into the user's repository, whose objects its agent could write anyway).
    pub fn create(
        dir: &Path,
        objects: &[PathBuf],
        write_to: Option<&Path>,
    ) -> Result<Scratch, Error> {
        let fail = |what: &str, e: std::io::Error| {
            Error::Git(format!("salvage: cannot {what} {}: {e}", dir.display()))
        };
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| fail("clear", e))?;
        }
        for sub in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| fail("create", e))?;
        }
        fs::write(dir.join("HEAD"), "ref: refs/heads/out\n").map_err(|e| fail("write", e))?;
        fs::write(dir.join("config"), SCRATCH_CONFIG).map_err(|e| fail("write", e))?;
        let mut alternates = Vec::new();
        for path in objects {
            alternates.extend_from_slice(path.as_os_str().as_bytes());
            alternates.push(b'\n');
        }
        fs::write(dir.join("objects/info/alternates"), alternates).map_err(|e| fail("write", e))?;
        let repo = git2::Repository::open_bare(dir).map_err(|e| {
            Error::Git(format!(
                "salvage: cannot open {}: {}",
                dir.display(),
                e.message()
            ))
        })?;
        Ok(Scratch {
            dir: ScratchDir(dir.to_path_buf()),
            repo,
            objects: std::cell::OnceCell::new(),
            indexes: std::cell::Cell::new(0),
            write_to: write_to.map(Path::to_path_buf),
        })
    }

    /// Ignores what the user's repository at `common` ignores beyond its `.gitignore`
    /// files: its `info/exclude` and the user's `core.excludesFile`, read as libgit2 reads
    /// them (this repository's config is grove's, without the user's setting).
    pub fn exclude_as(&self, common: &Path) -> Result<(), Error> {
        let mut rules = fs::read(common.join("info/exclude")).unwrap_or_default();
        let user_file = git2::Config::open_default()
            .and_then(|c| c.get_path("core.excludesfile"))
            .ok();
        if let Some(more) = user_file.and_then(|f| fs::read(f).ok()) {
            rules.push(b'\n');
            rules.extend(more);
        }
        if rules.is_empty() {
            return Ok(());
        }
        let info = self.path().join("info");
        fs::create_dir_all(&info)
            .and_then(|()| fs::write(info.join("exclude"), rules))
            .map_err(|e| Error::Git(format!("salvage: cannot write {}: {e}", info.display())))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Closes libgit2's handles, and the caches they hold, on this thread (a salvage's
    /// own, whose heap is handed back after it) and keeps the directory.
    pub fn into_dir(self) -> ScratchDir {
        self.dir
    }

    /// Hardened git on this repository, with `worktree` and `index`.
    fn git(&self, worktree: &Path, index: &Path) -> Command {
        let mut command = hardened_git();
        command
            .current_dir(worktree)
            .env("GIT_DIR", self.path())
            .env("GIT_WORK_TREE", worktree)
            .env("GIT_INDEX_FILE", index)
            .env("GIT_NO_REPLACE_OBJECTS", "1");
        if let Some(objects) = &self.write_to {
            command.env("GIT_OBJECT_DIRECTORY", objects);
        }
        command
    }

    fn new_index(&self) -> PathBuf {
        let n = self.indexes.get();
        self.indexes.set(n + 1);
        self.path().join(format!("index-{n}"))
    }

    /// True when `oid` names a commit this repository can read.
    pub fn is_commit(&self, oid: Oid) -> bool {
        self.repo.find_commit(oid).is_ok()
    }

    /// libgit2's handle on this repository.
    pub fn repo(&self) -> &git2::Repository {
        &self.repo
    }

    /// The tree of the commit `commit` names.
    fn tree_of(&self, commit: &str) -> Result<git2::Tree<'_>, git2::Error> {
        Oid::from_str(commit)
            .and_then(|c| self.repo.find_commit(c))
            .and_then(|c| c.tree())
    }

    /// Points `refs/heads/<name>` at `oid` (for a fetch to take).
    pub fn set_ref(&self, name: &str, oid: Oid) -> Result<(), Error> {
        let path = self.path().join("refs/heads").join(name);
        fs::write(&path, format!("{oid}\n"))
            .map_err(|e| Error::Git(format!("salvage: cannot write {}: {e}", path.display())))
    }

    /// Commits what `stage.worktree` holds on top of `stage.tip`.
    pub fn stage(&self, stage: &Stage<'_>) -> Result<Staged, Error> {
        let mut left_out = Vec::new();
        let tip = stage.tip.to_string();
        let tree = self.stage_dir(
            stage.worktree,
            Some((&tip, stage.index_seed)),
            stage.placed,
            stage.sparse,
            stage.max_file,
            "",
            &mut left_out,
            0,
            stage.keep_index,
        )?;
        let index = self.new_index();
        // libgit2 rather than one more git process: reading one commit costs no heap to
        // speak of, and each process a collect starts adds milliseconds.
        let tip_tree = self
            .repo
            .find_commit(stage.tip)
            .map(|c| c.tree_id())
            .map_err(|e| Error::Git(format!("salvage: cannot read {tip}: {}", e.message())))?;
        if tip_tree == tree {
            return Ok(Staged {
                commit: None,
                left_out,
            });
        }
        let commit = match self.commit_in_process(stage, tree) {
            Some(commit) => commit,
            None => self.commit_tree(stage, &index, tree)?,
        };
        Ok(Staged {
            commit: Some(commit),
            left_out,
        })
    }

    /// The repository new objects go to, opened by libgit2.
    fn objects_repo(&self) -> Result<&git2::Repository, git2::Error> {
        let Some(common) = self.write_to.as_deref().and_then(Path::parent) else {
            return Ok(&self.repo);
        };
        if let Some(repo) = self.objects.get() {
            return Ok(repo);
        }
        let repo = git2::Repository::open_bare(common)?;
        Ok(self.objects.get_or_init(|| repo))
    }

    /// The salvage commit, made by libgit2 as `git commit-tree` makes it (its message
    /// ends with a newline); `None` when libgit2 cannot (a name it refuses), for git.
    fn commit_in_process(&self, stage: &Stage<'_>, tree: Oid) -> Option<Oid> {
        let repo = self.objects_repo().ok()?;
        let when = git2::Time::new(stage.time_s as i64, 0);
        let who =
            |id: &super::authorship::Identity| git2::Signature::new(&id.name, &id.email, &when);
        let author = who(&stage.authorship.author).ok()?;
        let committer = who(&stage.authorship.committer).ok()?;
        let mut message = stage.authorship.message.clone();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        let tree = repo.find_tree(tree).ok()?;
        let parent = repo.find_commit(stage.tip).ok()?;
        repo.commit(None, &author, &committer, &message, &tree, &[&parent])
            .ok()
    }

    fn commit_tree(&self, stage: &Stage<'_>, index: &Path, tree: Oid) -> Result<Oid, Error> {
        let date = format!("{} +0000", stage.time_s);
        let commit = run(
            self.git(stage.worktree, index)
                .env("GIT_AUTHOR_NAME", &stage.authorship.author.name)
                .env("GIT_AUTHOR_EMAIL", &stage.authorship.author.email)
                .env("GIT_AUTHOR_DATE", &date)
                .env("GIT_COMMITTER_NAME", &stage.authorship.committer.name)
                .env("GIT_COMMITTER_EMAIL", &stage.authorship.committer.email)
                .env("GIT_COMMITTER_DATE", &date)
                .args([
                    "commit-tree",
                    &tree.to_string(),
                    "-p",
                    &stage.tip.to_string(),
                    "-m",
                    &stage.authorship.message,
                ]),
            "commit-tree",
        )?;
        parse_oid(&commit)
    }

    /// `git read-tree --reset <commit>` on `index`: the commit's entries, each with the
    /// stat data the index had for it when unchanged.
    fn reset_onto(
        &self,
        git: &impl Fn() -> Command,
        commit: &str,
        index: &Path,
    ) -> Result<(), Error> {
        if !fits_in_process(index) {
            return run(git().args(["read-tree", "--reset", commit]), "read-tree").map(drop);
        }
        let fail = |e: git2::Error| {
            Error::Git(format!(
                "salvage: cannot read {commit} into the index: {}",
                e.message()
            ))
        };
        let tree = self.tree_of(commit).map_err(fail)?;
        let mut staged = git2::Index::open(index).map_err(fail)?;
        staged.read_tree(&tree).map_err(fail)?;
        staged.write().map_err(fail)
    }

    /// `git write-tree` of `index`.
    fn write_tree(&self, git: &impl Fn() -> Command, index: &Path) -> Result<Oid, Error> {
        if !fits_in_process(index) {
            return parse_oid(&run(git().arg("write-tree"), "write-tree")?);
        }
        let fail = |e: git2::Error| {
            Error::Git(format!(
                "salvage: cannot write the tree of {}: {}",
                index.display(),
                e.message()
            ))
        };
        let repo = self.objects_repo().map_err(fail)?;
        git2::Index::open(index)
            .and_then(|mut staged| staged.write_tree_to(repo))
            .map_err(fail)
    }

    /// Stages each nested repository of `dir` on its own and puts its files in place
    /// of the gitlink `git add` would have recorded.
    #[allow(clippy::too_many_arguments)]
    fn stage_nested(
        &self,
        git: &impl Fn() -> Command,
        dir: &Path,
        nested: &[String],
        max_file: u64,
        prefix: &str,
        left_out: &mut Vec<String>,
        depth: usize,
    ) -> Result<(), Error> {
        for path in nested {
            if depth >= MAX_NESTING {
                return Err(Error::Git(format!(
                    "salvage: repositories nested more than {MAX_NESTING} deep at {prefix}{path}"
                )));
            }
            let inner = self.stage_dir(
                &dir.join(path),
                None,
                &[],
                &[],
                max_file,
                &format!("{prefix}{path}/"),
                left_out,
                depth + 1,
                false,
            )?;
            run(
                git()
                    .args(["rm", "-r", "-q", "--cached", "--ignore-unmatch", "--"])
                    .arg(format!(":(literal){path}")),
                "rm --cached",
            )?;
            run(
                git()
                    .arg("read-tree")
                    .arg(format!("--prefix={path}/"))
                    .arg(inner.to_string()),
                "read-tree --prefix",
            )?;
        }
        Ok(())
    }

    /// Stages `dir` onto the commit `tip`, with the stat data of `seed` (the agent's
    /// index) sparing unchanged files, all by libgit2 in the daemon: `None` when the seed
    /// is too big for that or marks an entry assume-unchanged (libgit2 would pass over
    /// it), for git to do. Files over `max_file` are left out as `git` would (a tracked
    /// one that kept its size is taken); nested repositories are left to the caller.
    /// The staged index is left in memory for the caller to write if it needs it.
    #[allow(clippy::too_many_arguments)]
    fn stage_seeded_in_process(
        &self,
        dir: &Path,
        tip: &str,
        seed: &Path,
        index: &Path,
        max_file: u64,
        prefix: &str,
        left_out: &mut Vec<String>,
    ) -> Result<Option<InProcess>, Error> {
        if !fits_in_process(seed) {
            return Ok(None);
        }
        // The copy has the seed's mtime before libgit2 reads it: that is the stamp it
        // tells racily clean entries by (see `copy_index`).
        copy_index(seed, index, |_| Ok(()))?;
        let fail = cannot_stage(dir);
        let tip_tree = self.tree_of(tip).map_err(fail)?;
        let mut staged = git2::Index::open(index).map_err(fail)?;
        // `git read-tree --reset`, in memory: the commit's entries, each with the stat
        // data the seed had for it when unchanged.
        staged.read_tree(&tip_tree).map_err(fail)?;
        // read_tree drops skip-worktree bits; an assume-unchanged one stays.
        if staged.iter().any(|e| e.flags & ASSUME_UNCHANGED != 0) {
            return Ok(None);
        }
        let odb = self.repo.odb().map_err(fail)?;
        let mut skipped: Vec<std::path::PathBuf> = Vec::new();
        let mut nested = Vec::new();
        // Asked again by the pass that records changes and deletions: a path passed
        // over once is passed over again, and not left out twice.
        let mut judge = |path: &Path, _: &[u8]| -> i32 {
            if skipped.iter().any(|s| path.starts_with(s)) {
                return 1;
            }
            let full = dir.join(path);
            let Ok(meta) = fs::symlink_metadata(&full) else {
                return 0;
            };
            if meta.is_dir() && fs::symlink_metadata(full.join(".git")).is_ok() {
                nested.push(path.to_string_lossy().trim_end_matches('/').to_string());
                skipped.push(path.to_path_buf());
                return 1;
            }
            if meta.is_file() && meta.len() > max_file {
                let kept_size = tip_tree
                    .get_path(path)
                    .ok()
                    .and_then(|e| odb.read_header(e.id()).ok())
                    .is_some_and(|(size, _)| size as u64 == meta.len());
                if !kept_size {
                    left_out.push(format!("{prefix}{}", path.display()));
                    skipped.push(path.to_path_buf());
                    return 1;
                }
            }
            0
        };
        let tree = self.add_all_in_process(dir, &mut staged, &mut judge)?;
        Ok(Some(InProcess {
            tree,
            nested,
            index: staged,
        }))
    }

    /// `git add -A` of what `specs` name, but `excluded`.
    fn add_by_git(
        &self,
        git: &impl Fn() -> Command,
        specs: Vec<String>,
        excluded: &[String],
    ) -> Result<(), Error> {
        let mut pathspec: Vec<u8> = Vec::new();
        for spec in specs {
            pathspec.extend_from_slice(spec.as_bytes());
            pathspec.push(0);
        }
        for path in excluded {
            pathspec.extend_from_slice(format!(":(exclude,literal){path}").as_bytes());
            pathspec.push(0);
        }
        let spec_file = self.path().join("pathspec");
        fs::write(&spec_file, &pathspec).map_err(|e| {
            Error::Git(format!(
                "salvage: cannot write {}: {e}",
                spec_file.display()
            ))
        })?;
        run(
            git()
                .args(["add", "-A", "--pathspec-file-nul"])
                .arg(format!("--pathspec-from-file={}", spec_file.display())),
            "add -A",
        )?;
        Ok(())
    }

    /// `git add -A` of `dir` onto `index`, but `excluded` (paths relative to `dir`), by
    /// libgit2 in the daemon: it tells an unchanged file by its stat data to the
    /// nanosecond, where git rereads every file changed in the second its index was
    /// written. The scratch repository's config (see `create`) pins what global or
    /// system config would change, as for hardened git; the new blobs land in it and go
    /// on to the user's repository with the rest (`publish_objects`).
    /// Returns the tree and the staged index (in memory).
    fn add_in_process(
        &self,
        dir: &Path,
        index: &Path,
        excluded: &[String],
    ) -> Result<(Oid, git2::Index), Error> {
        let mut staged = git2::Index::open(index).map_err(cannot_stage(dir))?;
        let mut skip = |path: &Path, _: &[u8]| -> i32 {
            i32::from(excluded.iter().any(|e| path.starts_with(e)))
        };
        let tree = self.add_all_in_process(dir, &mut staged, &mut skip)?;
        Ok((tree, staged))
    }

    /// `git add -A` by libgit2 of `dir` onto `staged`, but the paths `skip` answers
    /// positive for, in both passes: what is new or changed, then what changed or went.
    /// The new blobs go on to where new objects go, then the tree is written. Returns
    /// the tree; the index stays in memory (see `save_index`).
    fn add_all_in_process(
        &self,
        dir: &Path,
        staged: &mut git2::Index,
        skip: &mut git2::IndexMatchedPath<'_>,
    ) -> Result<Oid, Error> {
        let fail = cannot_stage(dir);
        self.repo.set_workdir(dir, false).map_err(fail)?;
        self.repo.set_index(staged).map_err(fail)?;
        staged
            .add_all(["*"], git2::IndexAddOption::DEFAULT, Some(&mut *skip))
            .and_then(|()| staged.update_all(["*"], Some(skip)))
            .map_err(fail)?;
        // The tree names the new blobs: they go to their repository first.
        self.publish_objects()?;
        let objects = self.objects_repo().map_err(fail)?;
        staged.write_tree_to(objects).map_err(fail)
    }

    /// Moves the loose objects libgit2 wrote into the scratch repository to where new
    /// objects go (`write_to`), where the git processes of later steps find them.
    fn publish_objects(&self) -> Result<(), Error> {
        let Some(to) = &self.write_to else {
            return Ok(());
        };
        let from = self.path().join("objects");
        let fail = |e: std::io::Error| {
            Error::Git(format!(
                "salvage: cannot move objects into {}: {e}",
                to.display()
            ))
        };
        for fan in fs::read_dir(&from).map_err(fail)?.flatten() {
            let name = fan.file_name();
            if name.len() != 2 {
                continue;
            }
            let dest = to.join(&name);
            fs::create_dir_all(&dest).map_err(fail)?;
            for object in fs::read_dir(fan.path()).map_err(fail)?.flatten() {
                let target = dest.join(object.file_name());
                if target.exists() {
                    continue;
                }
                if fs::hard_link(object.path(), &target).is_err() {
                    let partial = dest.join(format!("tmp_grove_{}", std::process::id()));
                    fs::copy(object.path(), &partial)
                        .and_then(|_| fs::rename(&partial, &target))
                        .map_err(fail)?;
                }
            }
            fs::remove_dir_all(fan.path()).map_err(fail)?;
        }
        Ok(())
    }

    /// Stages `dir` in an index of its own (starting from `start`, or empty) and
    /// returns the tree. Nested repositories are staged the same way, and their files
    /// put in place of the gitlink `git add` would have recorded. `keep_index`: the
    /// index must be on disk at the end (see `Stage::keep_index`).
    #[allow(clippy::too_many_arguments)]
    fn stage_dir(
        &self,
        dir: &Path,
        start: Option<(&str, Option<&Path>)>,
        placed: &[String],
        sparse: &[String],
        max_file: u64,
        prefix: &str,
        left_out: &mut Vec<String>,
        depth: usize,
        keep_index: bool,
    ) -> Result<Oid, Error> {
        let index = self.new_index();
        let git = || self.git(dir, &index);
        // An index staged in memory is written when a git step reads it next, or when it
        // becomes the index of a worktree that stays (as one leaving files out does).
        let written = |nested: &[String], left_out: &[String]| {
            let stays = keep_index || (depth == 0 && !left_out.is_empty());
            stays || !placed.is_empty() || !nested.is_empty()
        };
        if let (Some((tree, Some(seed))), true) = (start, sparse.is_empty()) {
            let judged = left_out.len();
            let staged = self
                .stage_seeded_in_process(dir, tree, seed, &index, max_file, prefix, left_out)
                .unwrap_or_else(|e| {
                    // An index libgit2 cannot read (a split index, say) is git's to stage.
                    tracing::debug!(error = %e, "staging with git instead");
                    left_out.truncate(judged);
                    None
                });
            if let Some(mut staged) = staged {
                if written(&staged.nested, left_out) {
                    save_index(&mut staged.index, &index)?;
                }
                if placed.is_empty() && staged.nested.is_empty() {
                    return Ok(staged.tree);
                }
                restore_placed(git, Some(tree), placed)?;
                self.stage_nested(&git, dir, &staged.nested, max_file, prefix, left_out, depth)?;
                return self.write_tree(&git, &index);
            }
        }
        let tracked = match start {
            Some((tree, seed)) => {
                // A one-way merge onto the seed keeps the stats of entries it leaves.
                let seeded = seed.is_some_and(|seed| {
                    copy_index(seed, &index, |index| self.reset_onto(&git, tree, index)).is_ok()
                });
                // A seed that cannot be read here (a split index names a shared index
                // in the agent's admin dir) is no seed.
                let tracked = seeded.then(|| Tracked::list(&git).ok()).flatten();
                match tracked {
                    // The merge keeps the seed's assume-unchanged and skip-worktree bits
                    // too, and `add -A` would pass over files carrying them: outside a
                    // sparse checkout, such a seed is dropped.
                    Some(tracked) if !sparse.is_empty() || !tracked.flagged() => tracked,
                    _ => {
                        let _ = fs::remove_file(&index);
                        run(git().args(["read-tree", tree]), "read-tree")?;
                        Tracked::list(&git)?
                    }
                }
            }
            None => {
                run(git().args(["read-tree", "--empty"]), "read-tree")?;
                Tracked::list(&git)?
            }
        };
        let untracked: Vec<&str> = tracked.untracked().collect();
        let nested: Vec<String> = untracked
            .iter()
            .filter(|p| p.ends_with('/'))
            .map(|p| p.trim_end_matches('/').to_string())
            .collect();
        // Paths the setup placed are not excluded from `add -A` (git refuses an exclude
        // naming an ignored path or one beyond a symbolic link): their entries are put
        // back as the start tree had them afterwards, see `restore_placed`.
        let mut excluded: Vec<String> = Vec::new();
        excluded.extend(nested.iter().cloned());
        let size_of = |path: &str| {
            fs::symlink_metadata(dir.join(path))
                .ok()
                .filter(|m| m.file_type().is_file())
                .map(|m| m.len())
        };
        let big_new = untracked
            .iter()
            .copied()
            .filter(|p| !p.ends_with('/') && size_of(p).is_some_and(|n| n > max_file));
        // A tracked file over the cap that kept its size is taken as it is (a big
        // asset the agent never touched must not count as work left out): git hashes
        // it. One that changed size is left out.
        let big_tracked: Vec<&str> = tracked
            .paths()
            .filter(|p| size_of(p).is_some_and(|n| n > max_file))
            .collect();
        let sizes = match (start, big_tracked.is_empty()) {
            (Some((tree, _)), false) => blob_sizes(&run(
                git().args(["ls-tree", "-r", "-l", "-z", tree]),
                "ls-tree",
            )?),
            _ => Default::default(),
        };
        let big_changed = big_tracked
            .into_iter()
            .filter(|p| sizes.get(*p) != size_of(p).as_ref());
        for path in big_new.chain(big_changed) {
            left_out.push(format!("{prefix}{path}"));
            excluded.push(path.to_string());
        }
        let specs = if sparse.is_empty() {
            included(sparse, &[])
        } else {
            let paths: Vec<&str> = tracked.paths().chain(untracked.iter().copied()).collect();
            included(sparse, &paths)
        };
        if specs.is_empty() {
            // Nothing in the cone, tracked or not: the index stays the tip's.
            return self.write_tree(&git, &index);
        }
        if sparse.is_empty() && fits_in_process(&index) {
            let (tree, mut staged) = self.add_in_process(dir, &index, &excluded)?;
            if written(&nested, left_out) {
                save_index(&mut staged, &index)?;
            }
            // Nothing more to put in: its tree, from the index libgit2 holds.
            if placed.is_empty() && nested.is_empty() {
                return Ok(tree);
            }
        } else {
            self.add_by_git(&git, specs, &excluded)?;
        }
        restore_placed(git, start.map(|(tree, _)| tree), placed)?;
        self.stage_nested(&git, dir, &nested, max_file, prefix, left_out, depth)?;
        self.write_tree(&git, &index)
    }
}

/// The error of libgit2 staging `dir`.
fn cannot_stage(dir: &Path) -> impl Fn(git2::Error) -> Error + Copy + '_ {
    move |e| {
        Error::Git(format!(
            "salvage: cannot stage {}: {}",
            dir.display(),
            e.message()
        ))
    }
}

/// Writes an index libgit2 staged in memory to `path`, the file it was read from.
fn save_index(staged: &mut git2::Index, path: &Path) -> Result<(), Error> {
    staged.write().map_err(|e| {
        Error::Git(format!(
            "salvage: cannot write {}: {}",
            path.display(),
            e.message()
        ))
    })
}

/// True when the index at `path` is small enough for libgit2 in the daemon.
fn fits_in_process(path: &Path) -> bool {
    let limit = crate::faults::salvage_in_process_bytes(IN_PROCESS_INDEX_BYTES);
    fs::metadata(path).is_ok_and(|m| m.len() <= limit)
}

/// Copies the index `seed` to `index`, runs `then` on the copy and gives the copy the
/// seed's mtime: git takes an entry whose file changed in the second its index was
/// written for unchanged unless it compares the contents ("racily clean"), and it
/// knows which entries those are from the index file's mtime. A copy with a later
/// mtime would hide an agent's same-size edit made in the second of its checkout.
fn copy_index(
    seed: &Path,
    index: &Path,
    then: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<(), Error> {
    let io =
        |e: std::io::Error| Error::Git(format!("salvage: cannot copy {}: {e}", seed.display()));
    let written = fs::metadata(seed).and_then(|m| m.modified()).map_err(io)?;
    fs::copy(seed, index).map_err(io)?;
    then(index)?;
    fs::File::options()
        .write(true)
        .open(index)
        .and_then(|f| f.set_modified(written))
        .map_err(io)
}

/// What `git add -A` looks at: everything, or for a cone-mode sparse checkout the
/// files at the top, the cone's directories and the files directly in their parents.
/// A pathspec that matches nothing is an error to git, so only those that match some
/// of `paths` (tracked and untracked) are given.
fn included(sparse: &[String], paths: &[&str]) -> Vec<String> {
    if sparse.is_empty() {
        return vec![".".into()];
    }
    let files_directly_in = |dir: &str| {
        paths.iter().any(|p| {
            let rest = if dir.is_empty() {
                Some(*p)
            } else {
                p.strip_prefix(dir).and_then(|r| r.strip_prefix('/'))
            };
            rest.is_some_and(|r| !r.is_empty() && !r.contains('/'))
        })
    };
    let mut specs = Vec::new();
    if files_directly_in("") {
        specs.push(":(glob)*".to_string());
    }
    for dir in sparse {
        let dir = dir.trim_matches('/');
        let prefix = format!("{dir}/");
        if paths.iter().any(|p| p.starts_with(&prefix)) {
            specs.push(format!(":(literal){dir}"));
        }
        let mut parent = Path::new(dir).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            let p_text = p.to_string_lossy();
            if files_directly_in(&p_text) {
                specs.push(format!(":(glob){p_text}/*"));
            }
            parent = p.parent();
        }
    }
    specs
}

/// Sizes of blobs by path, from `git ls-tree -r -l -z`.
fn blob_sizes(listing: &str) -> std::collections::HashMap<String, u64> {
    listing
        .split('\0')
        .filter_map(|line| {
            let (meta, path) = line.split_once('\t')?;
            let size = meta.split_whitespace().nth(3)?.parse().ok()?;
            Some((path.to_string(), size))
        })
        .collect()
}

/// Puts the index entries under the paths the setup placed back as `tree` had them
/// (removing those it did not have), so that a copied `.env` or a shared
/// `node_modules` link never lands on a branch, whatever `add -A` took.
fn restore_placed(
    git: impl Fn() -> Command,
    tree: Option<&str>,
    placed: &[String],
) -> Result<(), Error> {
    if placed.is_empty() {
        return Ok(());
    }
    let under = |path: &str| {
        placed.iter().any(|p| {
            let p = p.trim_end_matches('/');
            path == p
                || path
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    };
    let listed = run(git().args(["ls-files", "-s", "-z"]), "ls-files")?;
    let in_tree = match tree {
        Some(tree) => run(
            git().args(["ls-tree", "-r", "-z", "--full-tree", tree]),
            "ls-tree",
        )?,
        None => String::new(),
    };
    // ls-tree: `<mode> <type> <oid>\t<path>`; ls-files -s: `<mode> <oid> <stage>\t<path>`.
    let mut keep = std::collections::HashMap::new();
    for record in in_tree.split('\0').filter(|r| !r.is_empty()) {
        let Some((meta, path)) = record.split_once('\t') else {
            continue;
        };
        let fields: Vec<&str> = meta.split(' ').collect();
        if let ([mode, _, oid], true) = (fields.as_slice(), under(path)) {
            keep.insert(path, format!("{mode} {oid}\t{path}\0"));
        }
    }
    let mut info = String::new();
    for record in listed.split('\0').filter(|r| !r.is_empty()) {
        let Some((meta, path)) = record.split_once('\t') else {
            continue;
        };
        let oid_len = meta.split(' ').nth(1).map_or(40, str::len);
        if under(path) && !keep.contains_key(path) {
            info.push_str(&format!("0 {}\t{path}\0", "0".repeat(oid_len)));
        }
    }
    info.extend(keep.into_values());
    if info.is_empty() {
        return Ok(());
    }
    let mut child = git()
        .args(["update-index", "-z", "--index-info"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Git(format!("salvage: cannot run git update-index: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(info.as_bytes())
            .map_err(|e| Error::Git(format!("salvage: git update-index: {e}")))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| Error::Git(format!("salvage: git update-index: {e}")))?;
    if !output.status.success() {
        return Err(Error::Git(format!(
            "salvage: git update-index failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// The index's entries with their tags, and the files not in it (tag `?`; a nested
/// repository as `dir/`), from one `git ls-files -z -v -c -o`: one process where two
/// were. Kept as git wrote them: one string, not one allocation per path of a
/// 50,000-file worktree.
struct Tracked(String);

impl Tracked {
    fn list(git: &impl Fn() -> Command) -> Result<Tracked, Error> {
        run(
            git().args(["ls-files", "-z", "-v", "-c", "-o", "--exclude-standard"]),
            "ls-files",
        )
        .map(Tracked)
    }

    /// Each record split into its tag and its path.
    fn records(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .split('\0')
            .filter(|r| !r.is_empty())
            .map(|r| r.split_once(' ').unwrap_or(("", r)))
    }

    fn paths(&self) -> impl Iterator<Item = &str> {
        self.records()
            .filter(|(tag, _)| *tag != "?")
            .map(|(_, path)| path)
    }

    fn untracked(&self) -> impl Iterator<Item = &str> {
        self.records()
            .filter(|(tag, _)| *tag == "?")
            .map(|(_, path)| path)
    }

    /// An entry is marked assume-unchanged (its tag in lower case) or skip-worktree (`S`).
    fn flagged(&self) -> bool {
        self.records()
            .any(|(tag, _)| tag == "S" || tag.starts_with(|c: char| c.is_ascii_lowercase()))
    }
}

fn parse_oid(text: &str) -> Result<Oid, Error> {
    Oid::from_str(text.trim()).map_err(|_| {
        Error::Git(format!(
            "salvage: git answered `{}`, not an id",
            text.trim()
        ))
    })
}

/// Runs a git command to its end; its stdout, or an error carrying git's message.
fn run(command: &mut Command, what: &str) -> Result<String, Error> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Git(format!("salvage: cannot run git {what}: {e}")))?;
    if output.status.success() {
        Ok(String::from_utf8(output.stdout)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    } else {
        Err(Error::Git(format!(
            "salvage: git {what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A hardened `git fetch` into the repository whose git dir is `common` from the
/// grove-owned repository `from`, its refspecs still to add: no tags, no FETCH_HEAD,
/// no submodules, no maintenance. git hashes every object it receives, so nothing
/// enters under a name that is not its content's.
pub fn fetch_from(common: &Path, from: &Path) -> Command {
    let mut command = hardened_git();
    command
        .arg("--git-dir")
        .arg(common)
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-auto-maintenance",
        ])
        .arg(from)
        .stdin(Stdio::null());
    command
}

/// Brings `(scratch ref, destination ref)` pairs into the repository whose git dir is
/// `common`, forced: the destinations are refs only grove writes
/// (`refs/grove/import/...`); the caller moves branches from there. Runs in the lane.
pub fn fetch_into(common: &Path, scratch: &Path, refs: &[(String, String)]) -> Result<(), Error> {
    let mut command = fetch_from(common, scratch);
    for (from, to) in refs {
        command.arg(format!("+refs/heads/{from}:{to}"));
    }
    run(&mut command, "fetch").map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_cone_is_staged_only_where_it_matches_something() {
        let owned: Vec<String> = ["top.txt", "a/f", "c/deep/f", "c/x", "b/f"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let paths: Vec<&str> = owned.iter().map(String::as_str).collect();
        let cone = ["a".to_string(), "c/deep".to_string(), "gone".to_string()];
        assert_eq!(
            included(&cone, &paths),
            [":(glob)*", ":(literal)a", ":(literal)c/deep", ":(glob)c/*"]
        );
        let no_parent_files: Vec<&str> = paths.iter().copied().filter(|p| *p != "c/x").collect();
        assert!(!included(&cone, &no_parent_files).contains(&":(glob)c/*".to_string()));
        assert_eq!(included(&[], &paths), ["."]);
    }

    /// A crash between the salvage and its import makes the next daemon salvage again:
    /// the same job must make the same commit whichever way it was made.
    #[test]
    fn the_commit_made_in_process_is_the_one_git_commit_tree_makes() {
        use crate::git::authorship::Identity;
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = git2::Repository::init(dir.path().join("repo")).expect("init");
        let empty = repo
            .treebuilder(None)
            .and_then(|b| b.write())
            .expect("empty tree");
        let file = repo.blob(b"work\n").expect("blob");
        let mut builder = repo.treebuilder(None).expect("builder");
        builder.insert("work.txt", file, 0o100644).expect("insert");
        let tree = builder.write().expect("tree");
        let sig = git2::Signature::new("a", "a@b", &git2::Time::new(1, 0)).expect("sig");
        let tip = repo
            .find_tree(empty)
            .and_then(|t| repo.commit(None, &sig, &sig, "base\n", &t, &[]))
            .expect("tip");
        let objects = repo.path().join("objects");
        let scratch = Scratch::create(
            &dir.path().join("scratch"),
            std::slice::from_ref(&objects),
            Some(&objects),
        )
        .expect("scratch");
        let person = |name: &str| Identity {
            name: name.into(),
            email: format!("{name}@example.com"),
        };
        let authorship = super::super::authorship::Authorship {
            author: person("Ada Lovelace"),
            committer: person("grove"),
            message: "abc123: work left at exit\n\ngrove saved it.".into(),
        };
        let stage = Stage {
            worktree: dir.path(),
            tip,
            placed: &[],
            sparse: &[],
            max_file: u64::MAX,
            index_seed: None,
            authorship: &authorship,
            time_s: 1_700_000_000,
            keep_index: false,
        };
        let in_process = scratch.commit_in_process(&stage, tree).expect("libgit2");
        let by_git = scratch
            .commit_tree(&stage, &dir.path().join("index"), tree)
            .expect("git");
        assert_eq!(in_process, by_git);
    }

    #[test]
    fn blob_sizes_are_read_from_ls_tree() {
        let listing = "100644 blob 0123 12\ta b.txt\x00100644 blob 4567    3\tdir/c\x00";
        let sizes = blob_sizes(listing);
        assert_eq!(sizes.get("a b.txt"), Some(&12));
        assert_eq!(sizes.get("dir/c"), Some(&3));
    }
}

//! Which paths of a worktree may differ from an index, found by a few threads at once
//! (as git's preload-index does): the lstat of every tracked file is most of what a
//! checkpoint costs, and libgit2's own walk does them one by one, each from the
//! worktree's root. Here each directory is read once, its files are stat'ed relative
//! to it, and only the paths whose stat data is not exactly what the index holds are
//! handed to libgit2, which decides what they are (hash, ignore rules, links, nested
//! repositories) as before.
//!
//! A path is left out only when libgit2 would find it unmodified without hashing it:
//! same mode, size, mtime, ctime, inode, owner, and not "racily clean" (changed in the
//! same instant as the index was written). Anything else (an error, a directory that
//! cannot be opened, an unknown type, an untracked name) is a candidate. Directories
//! are opened with `O_NOFOLLOW | O_DIRECTORY` from their parent's descriptor and files
//! only lstat'ed: no link is followed, no file opened (a FIFO never blocks it).

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, FileStat, Mode};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Condvar, Mutex};

/// More threads than this gain nothing on a few thousand files. On 2 cores, 5,000
/// files: one thread 14.7 ms (median), two 13.0 (min 7.0), four 11.6, libgit2's walk
/// 16.1 at load 2.7; at load 10 one thread did best (12 ms against 16 for two), as a
/// woken thread waits for a core: the walk is short either way.
const MAX_THREADS: usize = 4;

/// The stat data an index entry holds, as libgit2 compares it.
#[derive(Clone, Copy)]
pub struct Tracked {
    pub mode: u32,
    pub size: u32,
    pub mtime: (i32, u32),
    pub ctime: (i32, u32),
    pub ino: u32,
    pub uid: u32,
    pub gid: u32,
}

/// One index entry of stage 0, or `None` for a path a conflict or a sparse checkout
/// leaves to libgit2 (never compared here).
pub struct Entry {
    pub path: Vec<u8>,
    pub stat: Option<Tracked>,
    /// Not in the worktree on purpose (skip-worktree): never a candidate.
    pub sparse: bool,
}

/// The paths under `worktree` that may differ from `entries` (sorted as an index is),
/// given that the index was last written at `index_mtime` (seconds, nanoseconds; `None`:
/// unknown, every file is racy). Each is a file, or a directory standing for everything
/// under it. `None`: the worktree itself could not be read, libgit2 is to walk it all.
pub fn candidates(
    worktree: &Path,
    entries: &[Entry],
    index_mtime: Option<(i64, i64)>,
) -> Option<Vec<Vec<u8>>> {
    let root = open_dir(None, worktree.as_os_str()).ok()?;
    let walk = Walk {
        tree: Expected::of(entries),
        index_mtime,
        queue: Mutex::new(Queue {
            jobs: vec![Job {
                path: Vec::new(),
                dir: root,
            }],
            busy: 0,
        }),
        wake: Condvar::new(),
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let mut found = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .spawn_scoped(s, || walk.work())
                    .ok()
            })
            .collect();
        let mut found = walk.work();
        for helper in helpers {
            found.extend(helper.join().ok()?);
        }
        Some(found)
    })?;
    found.sort_unstable();
    found.dedup();
    Some(found)
}

/// What the index says each directory holds: its files (with their stat data) and
/// its subdirectories.
#[derive(Default)]
struct Expected<'e> {
    dirs: HashMap<&'e [u8], Children<'e>>,
}

#[derive(Default)]
struct Children<'e> {
    files: Vec<(&'e [u8], &'e Entry)>,
    dirs: Vec<&'e [u8]>,
}

impl<'e> Expected<'e> {
    fn of(entries: &'e [Entry]) -> Self {
        let mut tree = Expected::default();
        tree.dirs.insert(&[][..], Children::default());
        for entry in entries {
            let (parent, name) = split(&entry.path);
            tree.add_dir(parent);
            if let Some(children) = tree.dirs.get_mut(parent) {
                children.files.push((name, entry));
            }
        }
        tree
    }

    /// Makes `dir` known, and each directory above it, each named once by its parent.
    fn add_dir(&mut self, dir: &'e [u8]) {
        let mut missing = Vec::new();
        let mut below = dir;
        while !self.dirs.contains_key(below) {
            missing.push(below);
            below = split(below).0;
        }
        for dir in missing.into_iter().rev() {
            self.dirs.insert(dir, Children::default());
            let (above, name) = split(dir);
            if let Some(children) = self.dirs.get_mut(above) {
                children.dirs.push(name);
            }
        }
    }
}

/// `a/b/c` → (`a/b`, `c`); `c` → (``, `c`).
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(at) => (&path[..at], &path[at + 1..]),
        None => (&[][..], path),
    }
}

struct Job {
    path: Vec<u8>,
    dir: Dir,
}

struct Queue {
    jobs: Vec<Job>,
    /// Threads reading a directory now (which may queue more).
    busy: usize,
}

/// A directory read: its subdirectories join the queue and its reader is no longer
/// busy, even if the reading panicked (or the other threads would wait for ever).
struct Done<'w, 'e> {
    walk: &'w Walk<'e>,
    more: Vec<Job>,
}

impl Drop for Done<'_, '_> {
    fn drop(&mut self) {
        let mut queue = self.walk.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.busy -= 1;
        queue.jobs.append(&mut self.more);
        self.walk.wake.notify_all();
    }
}

struct Walk<'e> {
    tree: Expected<'e>,
    index_mtime: Option<(i64, i64)>,
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Walk<'_> {
    /// Takes directories off the queue until none is left and none is being read.
    fn work(&self) -> Vec<Vec<u8>> {
        let mut found = Vec::new();
        while let Some(job) = self.next_job() {
            let mut done = Done {
                walk: self,
                more: Vec::new(),
            };
            done.more = self.read(job, &mut found);
        }
        found
    }

    fn next_job(&self) -> Option<Job> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = queue.jobs.pop() {
                queue.busy += 1;
                return Some(job);
            }
            if queue.busy == 0 {
                self.wake.notify_all();
                return None;
            }
            queue = self.wake.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Compares one directory with what the index says it holds; returns its
    /// subdirectories to read.
    fn read(&self, mut job: Job, found: &mut Vec<Vec<u8>>) -> Vec<Job> {
        let Some(expected) = self.tree.dirs.get(job.path.as_slice()) else {
            found.push(job.path);
            return Vec::new();
        };
        let mut present: HashMap<Vec<u8>, Option<Type>> = HashMap::new();
        for entry in job.dir.iter() {
            let Ok(entry) = entry else {
                // A directory that cannot be read through is libgit2's to judge.
                found.push(job.path);
                return Vec::new();
            };
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                present.insert(name.to_vec(), entry.file_type());
            }
        }
        if present.contains_key(&b".git"[..]) {
            if !job.path.is_empty() {
                // A nested repository: libgit2 records it as one entry.
                found.push(job.path);
                return Vec::new();
            }
            present.remove(&b".git"[..]);
        }
        let mut more = Vec::new();
        for &(name, entry) in &expected.files {
            let here = present.remove(name);
            if entry.sparse {
                continue;
            }
            let same = here.is_some()
                && entry
                    .stat
                    .is_some_and(|tracked| self.unchanged(&job.dir, name, &tracked));
            if !same {
                found.push(entry.path.clone());
            }
        }
        for &name in &expected.dirs {
            let path = join(&job.path, name);
            match present.remove(name) {
                Some(None | Some(Type::Directory)) => {
                    match open_dir(Some(&job.dir), OsStr::from_bytes(name)) {
                        Ok(dir) => more.push(Job { path, dir }),
                        Err(_) => found.push(path),
                    }
                }
                _ => found.push(path),
            }
        }
        // What the index does not name: untracked, perhaps ignored, libgit2 decides.
        found.extend(present.into_keys().map(|name| join(&job.path, &name)));
        more
    }

    /// Whether `name` in `dir` is what libgit2 would call unmodified without hashing.
    fn unchanged(&self, dir: &Dir, name: &[u8], tracked: &Tracked) -> bool {
        match fstatat(dir, OsStr::from_bytes(name), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => same_stat(&stat, tracked) && !self.racy(&stat),
            Err(_) => false,
        }
    }

    /// Written in the same instant as the index or after: its stat data cannot tell.
    #[allow(clippy::useless_conversion, reason = "other widths on macOS")]
    fn racy(&self, stat: &FileStat) -> bool {
        self.index_mtime
            .is_none_or(|index| (i64::from(stat.st_mtime), i64::from(stat.st_mtime_nsec)) >= index)
    }
}

/// The fields libgit2 compares (`maybe_modified`), ctime always (git's default).
#[allow(clippy::useless_conversion, reason = "other widths on macOS")]
fn same_stat(stat: &FileStat, tracked: &Tracked) -> bool {
    git_mode(u32::from(stat.st_mode)) == Some(tracked.mode)
        && stat.st_size as u32 == tracked.size
        && (stat.st_mtime as i32, stat.st_mtime_nsec as u32) == tracked.mtime
        && (stat.st_ctime as i32, stat.st_ctime_nsec as u32) == tracked.ctime
        && stat.st_ino as u32 == tracked.ino
        && stat.st_uid == tracked.uid
        && stat.st_gid == tracked.gid
}

/// The index mode of what lstat found: a file (executable or not) or a link.
fn git_mode(mode: u32) -> Option<u32> {
    const TYPE: u32 = 0o170000;
    match mode & TYPE {
        0o100000 if mode & 0o100 != 0 => Some(0o100755),
        0o100000 => Some(0o100644),
        0o120000 => Some(0o120000),
        _ => None,
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    path.extend_from_slice(dir);
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

/// A directory, never through a link (the worktree root included), never blocking.
fn open_dir(parent: Option<&Dir>, name: &OsStr) -> nix::Result<Dir> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_DIRECTORY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC;
    match parent {
        Some(parent) => Dir::openat(parent, name, flags, Mode::empty()),
        None => Dir::open(name, flags, Mode::empty()),
    }
}

//! Placing copies and links in a new worktree without following any symbolic link.
//!
//! The worktree holds whatever its base commit holds, and that may be an agent's: a
//! committed `.env -> ~/.bashrc` or `conf -> /etc` would otherwise turn a copy into a
//! write outside the worktree. So every path is resolved from a directory descriptor
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (`grove_sys::fs`), one
//! component at a time, and a link on the way is refused with its path named. Directories are copied by walking
//! descriptors, never paths.
//!
//! The source side is the user's main checkout. A link named by an entry (or found
//! inside a copied directory) is copied as a link, as it is; a link on the way to an
//! entry (`conf` of `conf/x`) is refused, since following it would copy from outside the
//! checkout without saying so.

use crate::error::Error;
use grove_sys::fs::open_beneath;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::symlinkat;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The main checkout and the new worktree, each opened once.
pub struct Roots {
    main: OwnedFd,
    worktree: OwnedFd,
}

/// Which side a path is on, for messages.
#[derive(Clone, Copy)]
enum Side {
    Main,
    Worktree,
}

impl Roots {
    pub fn open(main: &Path, worktree: &Path) -> Result<Roots, Error> {
        let open = |path: &Path| {
            nix::fcntl::open(
                path,
                OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| failed_at("cannot open", path, e))
        };
        Ok(Roots {
            main: open(main)?,
            worktree: open(worktree)?,
        })
    }

    /// Copies `rel` (a file, a link or a directory) from the main checkout into the
    /// worktree; false when the main checkout has no such path.
    pub fn copy(&self, rel: &str) -> Result<bool, Error> {
        let (parents, name) = split(rel)?;
        let from = match walk(&self.main, &parents, false) {
            Ok(dir) => dir,
            Err((_, Errno::ENOENT)) => return Ok(false),
            Err((at, errno)) => return Err(refusal(Side::Main, rel, &at, errno)),
        };
        let stat = match fstatat(&from, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(failed("reading", rel, e)),
        };
        let to = walk(&self.worktree, &parents, true)
            .map_err(|(at, errno)| refusal(Side::Worktree, rel, &at, errno))?;
        copy_entry(&from, &to, name, &stat, rel)?;
        Ok(true)
    }

    /// Makes `rel` in the worktree a link to the main checkout's `rel`.
    pub fn link(&self, main: &Path, rel: &str) -> Result<(), Error> {
        let (parents, name) = split(rel)?;
        let to = walk(&self.worktree, &parents, true)
            .map_err(|(at, errno)| refusal(Side::Worktree, rel, &at, errno))?;
        match symlinkat(&main.join(rel), &to, name) {
            Ok(()) => Ok(()),
            Err(Errno::EEXIST) => Err(existing(&to, name, rel, "symlink")),
            Err(e) => Err(failed("linking", rel, e)),
        }
    }
}

/// `a/b/c` as (`[a, b]`, `c`); `.` components dropped (`..` never gets here: see
/// check_relative).
fn split(rel: &str) -> Result<(Vec<&str>, &str), Error> {
    let mut parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let name = parts.pop().ok_or_else(|| {
        Error::BadInput(format!(
            "[worktree] path `{rel}` names no file or directory inside the repository"
        ))
    })?;
    Ok((parts, name))
}

/// Opens `root/parents...` one directory at a time, creating the missing ones when
/// `create`; on failure, the path up to the component that failed, and why.
fn walk(root: &OwnedFd, parents: &[&str], create: bool) -> Result<OwnedFd, (String, Errno)> {
    let directory = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
    let mut dir = open_beneath(root, ".", directory).map_err(|e| (".".to_string(), e))?;
    for (i, part) in parents.iter().enumerate() {
        let at = || parents[..=i].join("/");
        if create {
            match mkdirat(&dir, *part, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err((at(), e)),
            }
        }
        dir = open_beneath(&dir, part, directory).map_err(|e| (at(), e))?;
    }
    Ok(dir)
}

/// The error for a path that could not be walked: a link on the way is named as such.
fn refusal(side: Side, rel: &str, at: &str, errno: Errno) -> Error {
    match (side, errno) {
        (Side::Worktree, Errno::ELOOP | Errno::EXDEV) => link_in_worktree(rel, at),
        (Side::Worktree, Errno::ENOTDIR) => Error::Refused(format!(
            "[worktree] `{rel}`: `{at}` in the new worktree is not a directory (as the base \
             commit has it): remove `{at}` from that branch, or `{rel}` from .grove.toml"
        )),
        (Side::Main, Errno::ELOOP | Errno::EXDEV | Errno::ENOTDIR) => Error::Refused(format!(
            "[worktree] `{rel}`: `{at}` in the main checkout is a symbolic link or not a \
             directory; grove does not follow links on the way to a copied path: name \
             the path behind the link in .grove.toml"
        )),
        (_, e) => failed("reaching", rel, e),
    }
}

fn link_in_worktree(rel: &str, at: &str) -> Error {
    Error::Refused(format!(
        "[worktree] `{rel}`: `{at}` in the new worktree is a symbolic link (as the base \
         commit has it); grove places files only beneath the worktree and never through a \
         link, so nothing was created: remove `{at}` from that branch, or `{rel}` from \
         .grove.toml"
    ))
}

fn failed(what: &'static str, rel: &str, e: Errno) -> Error {
    failed_at(what, Path::new(rel), e)
}

fn failed_at(what: &'static str, path: &Path, e: Errno) -> Error {
    Error::Setup {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// Something is already at `name` in the worktree: a link is refused as such, anything
/// else as tracked content in the way.
fn existing(dir: &OwnedFd, name: &str, rel: &str, kind: &str) -> Error {
    let is_link = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map(|s| file_type(&s) == SFlag::S_IFLNK)
        .unwrap_or(false);
    if is_link {
        link_in_worktree(rel, rel)
    } else {
        Error::BadInput(format!(
            "[worktree] {kind} `{rel}`: the worktree already has it (is it tracked?)"
        ))
    }
}

fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// Copies `name` of `from` (described by `stat`) to `name` of `to`.
fn copy_entry(
    from: &OwnedFd,
    to: &OwnedFd,
    name: &str,
    stat: &FileStat,
    rel: &str,
) -> Result<(), Error> {
    let mode = Mode::from_bits_truncate(stat.st_mode & 0o777);
    match file_type(stat) {
        SFlag::S_IFLNK => {
            let target = readlinkat(from, name).map_err(|e| failed("reading", rel, e))?;
            match symlinkat(target.as_os_str(), to, name) {
                Ok(()) => Ok(()),
                Err(Errno::EEXIST) => Err(existing(to, name, rel, "copy")),
                Err(e) => Err(failed("linking", rel, e)),
            }
        }
        SFlag::S_IFDIR => copy_dir(from, to, name, mode, rel),
        SFlag::S_IFREG => {
            let source =
                open_beneath(from, name, OFlag::O_RDONLY).map_err(|e| failed("reading", rel, e))?;
            let target = open_beneath(to, name, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC)
                .map_err(|e| match e {
                    Errno::ELOOP => existing(to, name, rel, "copy"),
                    e => failed("writing", rel, e),
                })?;
            fchmod(&target, mode).map_err(|e| failed("writing", rel, e))?;
            let (source, target) = (File::from(source), File::from(target));
            // Where both sides are on one filesystem with reflinks, a clone: it shares
            // the main checkout's blocks until either is written (a warm build cache
            // costs no disk); elsewhere a copy.
            if grove_sys::reflink::clone_file(&source, &target).is_ok() {
                return Ok(());
            }
            std::io::copy(&mut &source, &mut &target)
                .map(|_| ())
                .map_err(|source| Error::Setup {
                    what: "copying",
                    path: rel.into(),
                    source,
                })
        }
        _ => Err(Error::BadInput(format!(
            "[worktree] copy `{rel}`: not a regular file, directory or symbolic link; grove \
             copies only those"
        ))),
    }
}

fn copy_dir(from: &OwnedFd, to: &OwnedFd, name: &str, mode: Mode, rel: &str) -> Result<(), Error> {
    let directory = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
    match mkdirat(to, name, mode | Mode::S_IRWXU) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(failed("creating", rel, e)),
    }
    let source = open_beneath(from, name, directory).map_err(|e| failed("reading", rel, e))?;
    let target = open_beneath(to, name, directory).map_err(|e| match e {
        Errno::ELOOP | Errno::ENOTDIR => existing(to, name, rel, "copy"),
        e => failed("creating", rel, e),
    })?;
    for entry in entries(&source).map_err(|e| failed("reading", rel, e))? {
        let Some(entry) = entry.to_str() else {
            return Err(Error::BadInput(format!(
                "[worktree] copy `{rel}`: holds a name that is not UTF-8 ({}); grove copies \
                 only UTF-8 names",
                String::from_utf8_lossy(entry.as_bytes())
            )));
        };
        let inner = format!("{rel}/{entry}");
        let stat = fstatat(&source, entry, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| failed("reading", &inner, e))?;
        copy_entry(&source, &target, entry, &stat, &inner)?;
    }
    Ok(())
}

/// The names in a directory, without `.` and `..`.
fn entries(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let mut listing = Dir::openat(
        dir,
        ".",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let bytes = entry?.file_name().to_bytes().to_vec();
        if bytes != b"." && bytes != b".." {
            names.push(std::ffi::OsStr::from_bytes(&bytes).to_os_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn roots() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (main, wt) = (dir.path().join("main"), dir.path().join("wt"));
        fs::create_dir_all(&main).expect("mkdir");
        fs::create_dir_all(&wt).expect("mkdir");
        (dir, main, wt)
    }

    #[test]
    fn copies_files_links_and_directories_beneath_the_worktree() {
        let (_dir, main, wt) = roots();
        fs::create_dir_all(main.join("conf/deep")).expect("mkdir");
        fs::write(main.join("conf/deep/a"), "a").expect("write");
        symlink("deep/a", main.join("conf/link")).expect("link");
        fs::write(main.join(".env"), "x").expect("write");
        let roots = Roots::open(&main, &wt).expect("open");
        assert!(roots.copy(".env").expect("copy"));
        assert!(roots.copy("conf").expect("copy"));
        assert!(!roots.copy("nope/x").expect("copy"));
        assert_eq!(fs::read_to_string(wt.join(".env")).expect("read"), "x");
        assert_eq!(
            fs::read_to_string(wt.join("conf/deep/a")).expect("read"),
            "a"
        );
        assert_eq!(
            fs::read_link(wt.join("conf/link")).expect("link"),
            Path::new("deep/a")
        );
    }

    #[test]
    fn never_writes_through_a_link_in_the_worktree() {
        let (dir, main, wt) = roots();
        let outside = dir.path().join("outside");
        fs::create_dir_all(&outside).expect("mkdir");
        fs::write(outside.join("victim"), "safe").expect("write");
        fs::write(main.join("victim"), "evil").expect("write");
        fs::create_dir_all(main.join("conf")).expect("mkdir");
        fs::write(main.join("conf/victim"), "evil").expect("write");
        symlink(outside.join("victim"), wt.join("victim")).expect("link");
        symlink(&outside, wt.join("conf")).expect("link");
        let roots = Roots::open(&main, &wt).expect("open");
        let e = roots.copy("victim").expect_err("refused").to_string();
        assert!(e.contains("`victim`") && e.contains("symbolic link"), "{e}");
        let e = roots.copy("conf/victim").expect_err("refused").to_string();
        assert!(e.contains("`conf`") && e.contains("symbolic link"), "{e}");
        let e = roots
            .link(&main, "conf/victim")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(
            fs::read_to_string(outside.join("victim")).expect("read"),
            "safe"
        );
    }
}

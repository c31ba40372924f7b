//! A CLI's settings file read and replaced without following a symbolic link: the
//! directory below `$HOME` and the file are opened with `openat2(RESOLVE_NO_SYMLINKS)`
//! from a descriptor of `$HOME`, and the new text is written to a temporary file in
//! the same directory and renamed over the old one, so that the CLI never reads half
//! a file and a link planted in its place is replaced, never written through.

use grove_sys::fs::open_beneath;
use nix::errno::Errno;
use nix::fcntl::{renameat, OFlag};
use nix::sys::stat::{fchmod, fstat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The biggest settings file read (`~/.claude.json` grows with every project).
const MAX_BYTES: u64 = 32 << 20;

/// A directory holding a CLI's file, opened below `home`.
pub struct Dir {
    fd: OwnedFd,
}

/// What a file held, and its mode (kept by the replacement).
pub struct Text {
    pub text: String,
    mode: Mode,
}

impl Dir {
    /// `dir` below `home` (`""`: `home` itself); `None` when it does not exist or is
    /// reached through a link.
    pub fn open(home: &Path, dir: &str) -> io::Result<Option<Dir>> {
        let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
        let home = match nix::fcntl::open(home, flags | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if dir.is_empty() {
            return Ok(Some(Dir { fd: home }));
        }
        match open_beneath(&home, dir, flags) {
            Ok(fd) => Ok(Some(Dir { fd })),
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The text of `name`; `None` when there is none, or it is a link or no regular
    /// file.
    pub fn read(&self, name: &str) -> io::Result<Option<Text>> {
        let fd = match open_beneath(&self.fd, name, OFlag::O_RDONLY | OFlag::O_NONBLOCK) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ELOOP) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let stat = fstat(&fd)?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Ok(None);
        }
        if stat.st_size as u64 > MAX_BYTES {
            return Err(io::Error::other(format!(
                "{name} is over {} MiB",
                MAX_BYTES >> 20
            )));
        }
        let mut text = String::new();
        File::from(fd).read_to_string(&mut text)?;
        Ok(Some(Text {
            text,
            mode: Mode::from_bits_truncate(stat.st_mode & 0o7777),
        }))
    }

    /// Replaces `name` with `text` (mode of `old`) in one rename.
    pub fn replace(&self, name: &str, old: &Text, text: &str) -> io::Result<()> {
        let temp = format!(".{name}.grove-{}", crate::ids::random_hex(4)?);
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        let fd = open_beneath(&self.fd, &temp, flags)?;
        let written = (|| {
            fchmod(&fd, old.mode)?;
            let mut file = File::from(fd);
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            renameat(&self.fd, temp.as_str(), &self.fd, name)?;
            io::Result::Ok(())
        })();
        if written.is_err() {
            let _ = unlinkat(&self.fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        written
    }

    /// Holds the lock the CLI takes itself while it writes `name` (`<name>.lock`, a
    /// directory: the `proper-lockfile` convention of the npm CLIs), so that neither
    /// loses the other's change. One older than `stale` is a dead writer's. `None`
    /// when the lock stays taken.
    pub fn lock(&self, name: &str, stale: Duration) -> io::Result<Option<Lock<'_>>> {
        let lock = format!("{name}.lock");
        for _ in 0..40 {
            match mkdirat(&self.fd, lock.as_str(), Mode::from_bits_truncate(0o700)) {
                Ok(()) => {
                    return Ok(Some(Lock {
                        dir: self,
                        name: lock,
                    }))
                }
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
            if self.older_than(&lock, stale) {
                let _ = unlinkat(&self.fd, lock.as_str(), UnlinkatFlags::RemoveDir);
                continue;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(None)
    }

    fn older_than(&self, name: &str, age: Duration) -> bool {
        let Ok(fd) = open_beneath(&self.fd, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
            return false;
        };
        let Ok(stat) = fstat(fd.as_fd()) else {
            return false;
        };
        let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(stat.st_mtime.max(0) as u64);
        SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|d| d > age)
    }
}

/// A held `<name>.lock`, released when dropped.
pub struct Lock<'a> {
    dir: &'a Dir,
    name: String,
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        let _ = unlinkat(&self.dir.fd, self.name.as_str(), UnlinkatFlags::RemoveDir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_in_place_keeps_the_mode_and_never_writes_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path();
        fs::create_dir(home.join(".cli")).expect("mkdir");
        let file = home.join(".cli/settings.json");
        fs::write(&file, "{}").expect("write");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).expect("chmod");
        let cli = Dir::open(home, ".cli").expect("open").expect("a dir");
        let old = cli.read("settings.json").expect("read").expect("a file");
        assert_eq!(old.text, "{}");
        cli.replace("settings.json", &old, "{\"a\": 1}")
            .expect("replace");
        assert_eq!(fs::read_to_string(&file).expect("read"), "{\"a\": 1}");
        let mode = fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(fs::read_dir(home.join(".cli")).expect("ls").count(), 1);

        // A link where the file was, or where its directory was: not read.
        let target = home.join("elsewhere");
        fs::write(&target, "theirs").expect("write");
        fs::remove_file(&file).expect("rm");
        std::os::unix::fs::symlink(&target, &file).expect("link");
        assert!(cli.read("settings.json").expect("read").is_none());
        std::os::unix::fs::symlink(home.join(".cli"), home.join(".via")).expect("link");
        assert!(Dir::open(home, ".via").expect("open").is_none());
        // Replaced, the link is gone and its target untouched.
        cli.replace("settings.json", &old, "{}").expect("replace");
        assert_eq!(fs::read_to_string(&target).expect("read"), "theirs");
        assert!(!fs::symlink_metadata(&file).expect("stat").is_symlink());
    }

    #[test]
    fn a_held_lock_is_waited_for_and_a_stale_one_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cli = Dir::open(dir.path(), "").expect("open").expect("a dir");
        let held = cli.lock("f.json", Duration::from_secs(10)).expect("lock");
        assert!(held.is_some());
        assert!(dir.path().join("f.json.lock").is_dir());
        assert!(cli
            .lock("f.json", Duration::from_secs(10))
            .expect("lock")
            .is_none());
        // A dead writer's (older than `stale`) is taken over.
        std::thread::sleep(Duration::from_millis(1100));
        let again = cli.lock("f.json", Duration::from_millis(10)).expect("lock");
        assert!(again.is_some());
        drop(again);
        std::mem::forget(held);
        assert!(!dir.path().join("f.json.lock").exists());
    }
}

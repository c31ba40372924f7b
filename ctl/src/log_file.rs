//! The daemon's log file, rotated by size so that it never grows without bound:
//! `daemon.log` is current, `daemon.log.1` the one before, up to `daemon.log.<keep-1>`.
//!
//! tracing's fmt layer writes each event with one `write_all`, so rotation happens
//! between events and never splits a line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default size at which the log rotates; `GROVE_LOG_MAX_BYTES` overrides it.
pub const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Files kept, the current one included.
pub const KEEP_FILES: usize = 3;

pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: File,
    size: u64,
    /// After a failed rotation, when the next one may be tried: a flood of lines must
    /// not make a failing attempt of each.
    retry_at: Option<Instant>,
}

/// How long a failed rotation waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl RotatingFile {
    pub fn open(path: &Path, max_bytes: u64, keep: usize) -> io::Result<RotatingFile> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(1),
            keep: keep.max(1),
            file,
            size,
            retry_at: None,
        })
    }

    /// `GROVE_LOG_MAX_BYTES`, else [`DEFAULT_MAX_BYTES`].
    pub fn max_bytes_from_env() -> u64 {
        std::env::var("GROVE_LOG_MAX_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_BYTES)
    }

    fn numbered(&self, n: usize) -> PathBuf {
        self.with_suffix(&n.to_string())
    }

    fn with_suffix(&self, suffix: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{suffix}"));
        PathBuf::from(name)
    }

    /// daemon.log.1 -> .2 -> ... (the oldest is replaced), daemon.log -> .1, a new
    /// daemon.log. The new file is made first, under another name, and every step is a
    /// rename that replaces its target at once: if any step fails (no descriptor left,
    /// say), the current file stays where it is and nothing was deleted.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep == 1 {
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        let fresh_path = self.with_suffix("new");
        let fresh = open_new(&fresh_path)?;
        let moved = self.shift_older().and_then(|()| {
            std::fs::rename(&self.path, self.numbered(1))?;
            std::fs::rename(&fresh_path, &self.path).inspect_err(|_| {
                // Put the current file back under its name.
                let _ = std::fs::rename(self.numbered(1), &self.path);
            })
        });
        if let Err(e) = moved {
            let _ = std::fs::remove_file(&fresh_path);
            return Err(e);
        }
        self.file = fresh;
        self.size = 0;
        Ok(())
    }

    fn shift_older(&self) -> io::Result<()> {
        for n in (1..self.keep - 1).rev() {
            let from = self.numbered(n);
            if from.exists() {
                std::fs::rename(&from, self.numbered(n + 1))?;
            }
        }
        Ok(())
    }

    /// A file that lost its name (deleted by hand, or by an older grove's failed
    /// rotation) is written to nowhere: start a new one under the name.
    fn reopen_if_unlinked(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let unlinked = self.file.metadata().is_ok_and(|m| m.nlink() == 0);
        if unlinked {
            if let Ok(file) = open_append(&self.path) {
                self.size = file.metadata().map_or(0, |m| m.len());
                self.file = file;
            }
        }
    }

    fn rotate_if_full(&mut self, incoming: u64) {
        if self.size == 0 || self.size + incoming <= self.max_bytes {
            return;
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            self.stay_bounded();
            return;
        }
        match self.rotate() {
            Ok(()) => self.retry_at = None,
            Err(e) => {
                // A log that cannot rotate still logs: keep writing to the current file.
                eprintln!("grove daemon: cannot rotate {}: {e}", self.path.display());
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                self.stay_bounded();
            }
        }
    }

    /// While rotation keeps failing, the current file is emptied at twice the size
    /// limit rather than growing without bound.
    fn stay_bounded(&mut self) {
        if self.size > self.max_bytes.saturating_mul(2) && self.file.set_len(0).is_ok() {
            self.size = 0;
            let note = "grove daemon: the log could not rotate and was emptied to stay bounded\n";
            if self.file.write_all(note.as_bytes()).is_ok() {
                self.size = note.len() as u64;
            }
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Opens `path` empty (a leftover of an interrupted rotation is emptied).
fn open_new(path: &Path) -> io::Result<File> {
    let file = open_append(path)?;
    file.set_len(0)?;
    Ok(file)
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.reopen_if_unlinked();
        self.rotate_if_full(buf.len() as u64);
        self.file.write_all(buf)?;
        self.size += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for test `name`, and `daemon.log` there, opened to rotate at
    /// 100 bytes and keep 3 files.
    fn fresh_log(name: &str) -> (PathBuf, PathBuf, RotatingFile) {
        let dir = std::env::temp_dir().join(format!("grove-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("daemon.log");
        let log = RotatingFile::open(&path, 100, 3).expect("open");
        (dir, path, log)
    }

    #[test]
    fn rotates_by_size_and_keeps_three_files() {
        let (dir, path, mut log) = fresh_log("test");
        for i in 0..50 {
            log.write_all(format!("line {i:04} of the log\n").as_bytes())
                .expect("write");
        }
        let names: Vec<String> = {
            let mut names: Vec<_> = std::fs::read_dir(&dir)
                .expect("read dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names, ["daemon.log", "daemon.log.1", "daemon.log.2"]);
        for name in &names {
            let len = std::fs::metadata(dir.join(name)).expect("meta").len();
            assert!(len <= 100, "{name} is {len} bytes");
        }
        let newest = std::fs::read_to_string(&path).expect("read");
        assert!(newest.ends_with("line 0049 of the log\n"), "{newest}");
        let older = std::fs::read_to_string(dir.join("daemon.log.1")).expect("read");
        assert!(older.lines().all(|l| l.starts_with("line ")), "whole lines");
        // Reopening continues the current file's count.
        drop(log);
        let log = RotatingFile::open(&path, 100, 3).expect("reopen");
        assert_eq!(log.size, newest.len() as u64);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_rotation_deletes_nothing_and_an_unlinked_log_is_reopened() {
        let (dir, path, mut log) = fresh_log("fail");
        log.write_all(b"first file, long enough to fill most of it up to the limit of bytes\n")
            .expect("write");
        // The next rotation cannot make its new file: the name is taken by a directory.
        std::fs::create_dir(dir.join("daemon.log.new")).expect("block");
        log.write_all(b"second line that does not fit in the first file's remaining room\n")
            .expect("write");
        let current = std::fs::read_to_string(&path).expect("the log keeps its name");
        assert!(current.contains("second line"), "{current}");
        assert!(!dir.join("daemon.log.1").exists());
        // Deleted by hand: the next line starts a new file under the name.
        std::fs::remove_file(&path).expect("rm");
        log.write_all(b"after the delete\n").expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("reopened"),
            "after the delete\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The daemon's log file, rotated by size so that it never grows without bound:
//! `daemon.log` is current, `daemon.log.1` the one before, up to `daemon.log.<keep-1>`.
//!
//! tracing's fmt layer writes each event with one `write_all`, so rotation happens
//! between events and never splits a line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
}

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
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// daemon.log.1 -> .2 -> ... (the oldest falls off), daemon.log -> .1, a new daemon.log.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep == 1 {
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(self.numbered(self.keep - 1));
        for n in (1..self.keep - 1).rev() {
            let from = self.numbered(n);
            if from.exists() {
                std::fs::rename(&from, self.numbered(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.numbered(1))?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.size > 0 && self.size + buf.len() as u64 > self.max_bytes {
            // A log that cannot rotate still logs: keep writing to the current file.
            if let Err(e) = self.rotate() {
                eprintln!("grove daemon: cannot rotate {}: {e}", self.path.display());
            }
        }
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

    #[test]
    fn rotates_by_size_and_keeps_three_files() {
        let dir = std::env::temp_dir().join(format!("grove-log-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("daemon.log");
        let mut log = RotatingFile::open(&path, 100, 3).expect("open");
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
}

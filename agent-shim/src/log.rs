//! The agent's log as the shim writes it, for a terminal's output and a headless
//! agent's alike.
//!
//! - Output that cannot be stored (a full disk) is never dropped without a word: the
//!   next write that succeeds is preceded by a line saying how many bytes are missing
//!   there and why.
//! - With `log_max`, the log stays within it in two halves (`grove_proto::agent_log`):
//!   an agent printing as fast as it can must not fill the disk the other agents
//!   write to.

use grove_proto::agent_log::{marker, old_path, LogView};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Halves smaller than this would be mostly marker lines.
const MIN_HALF: u64 = 4096;

pub struct Log {
    /// `None` between a rotation's rename and the open of the new file that failed.
    file: Option<File>,
    halves: Option<Halves>,
    /// Bytes of output not stored since the last successful write, and why.
    unsaved: u64,
    cause: Option<io::Error>,
}

/// The state of a log kept in two halves.
struct Halves {
    path: PathBuf,
    half: u64,
    /// The current file's size, and its marker line's.
    len: u64,
    skip: u64,
    /// The output in `.old`; `None`: there is none yet.
    old: Option<u64>,
    /// Output dropped before `.old`.
    dropped: u64,
    /// The shim's own stdout and stderr (its messages) follow the current file.
    own_output: bool,
}

impl Log {
    /// A log that grows without bound (a spec of a daemon that sends no `log_max`).
    pub fn new(file: File) -> Log {
        Log {
            file: Some(file),
            halves: None,
            unsaved: 0,
            cause: None,
        }
    }

    /// The log at `path`, kept within `max` bytes, continuing what is there. With
    /// `own_output`, the shim's stdout and stderr are moved to each new file.
    pub fn open(path: PathBuf, max: u64, own_output: bool) -> io::Result<Log> {
        let (dropped, old, len, skip) = LogView::open(&path)?.resume();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Log {
            file: Some(file),
            halves: Some(Halves {
                path,
                half: (max / 2).max(MIN_HALF),
                len,
                skip,
                old,
                dropped,
                own_output,
            }),
            unsaved: 0,
            cause: None,
        })
    }

    pub fn write(&mut self, bytes: &[u8]) {
        if self.unsaved > 0 {
            let cause = self
                .cause
                .as_ref()
                .map_or_else(String::new, |e| format!(": {e}"));
            let gap = format!(
                "\r\n[grove: {} bytes of output are missing here, they could not be saved{cause}]\r\n",
                self.unsaved
            );
            if let Err(e) = self.put(gap.as_bytes()) {
                self.lost(bytes.len(), e);
                return;
            }
            self.unsaved = 0;
            self.cause = None;
        }
        if let Err(e) = self.put(bytes) {
            // A partial write is counted whole: the gap line may stand a little early.
            self.lost(bytes.len(), e);
        }
    }

    fn lost(&mut self, len: usize, cause: io::Error) {
        self.unsaved += len as u64;
        self.cause = Some(cause);
    }

    /// Writes `bytes`, starting a new half wherever the current one fills.
    fn put(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.halves.as_ref().is_some_and(|h| h.len >= h.half) {
                self.rotate()?;
            }
            if self.file.is_none() {
                self.reopen()?;
            }
            let Some(file) = self.file.as_mut() else {
                return Err(io::Error::other("the log has no file"));
            };
            let Some(halves) = self.halves.as_mut() else {
                return file.write_all(bytes);
            };
            let room = halves.half.saturating_sub(halves.len).max(1) as usize;
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            file.write_all(now)?;
            halves.len += now.len() as u64;
            bytes = rest;
        }
        Ok(())
    }

    /// The current half becomes `.old` (the older one is dropped) and a new one takes
    /// its name with its marker line already in it: made beside it first, so that no
    /// reader ever finds a new half without the marker that places its bytes.
    fn rotate(&mut self) -> io::Result<()> {
        let Some(halves) = self.halves.as_mut() else {
            return Ok(());
        };
        let dropped = halves.dropped + halves.old.unwrap_or(0);
        let line = if dropped > 0 {
            marker(dropped)
        } else {
            String::new()
        };
        let mut next = halves.path.as_os_str().to_owned();
        next.push(".next");
        let next = PathBuf::from(next);
        if let Err(e) = std::fs::write(&next, line.as_bytes()) {
            let _ = std::fs::remove_file(&next);
            return Err(e);
        }
        std::fs::rename(&halves.path, old_path(&halves.path))?;
        std::fs::rename(&next, &halves.path)?;
        halves.dropped = dropped;
        halves.old = Some(halves.len - halves.skip);
        halves.len = line.len() as u64;
        halves.skip = halves.len;
        self.file = None;
        self.reopen()
    }

    fn reopen(&mut self) -> io::Result<()> {
        let Some(halves) = self.halves.as_ref() else {
            return Ok(());
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&halves.path)?;
        if halves.own_output {
            // The shim's own messages (a start that failed, the jail's init) go where
            // the agent's output goes, not into a half about to be dropped.
            for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
                // SAFETY: dup2 onto the shim's own standard descriptors, which it owns.
                unsafe { libc::dup2(file.as_raw_fd(), fd) };
            }
        }
        self.file = Some(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Log;
    use grove_proto::agent_log::{marker, old_path, LogView};

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("grove-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn output_that_cannot_be_written_leaves_a_gap_line_with_its_size() {
        // /dev/full fails every write with ENOSPC, as a full disk does.
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return;
        };
        let mut log = Log::new(full);
        log.write(b"lost one");
        log.write(b"lost two");
        assert_eq!(log.unsaved, 16);
        let path = std::env::temp_dir().join(format!("grove-log-gap-{}", std::process::id()));
        log.file = Some(std::fs::File::create(&path).expect("create"));
        log.write(b"back");
        let text = std::fs::read_to_string(&path).expect("read");
        let _ = std::fs::remove_file(&path);
        assert!(text.contains("16 bytes of output are missing"), "{text}");
        assert!(text.contains("No space left on device"), "{text}");
        assert!(text.ends_with("back"), "{text}");
        assert_eq!(log.unsaved, 0);
    }

    #[test]
    fn a_log_kept_in_halves_stays_within_its_max_and_keeps_the_newest() {
        let dir = temp("halves");
        let path = dir.join("output.log");
        let mut log = Log::open(path.clone(), 16 << 10, false).expect("open");
        let mut written = 0u64;
        for i in 0..10_000u32 {
            let line = format!("line {i:05}\n");
            written += line.len() as u64;
            log.write(line.as_bytes());
        }
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let on_disk = size(&path) + size(&old_path(&path));
        assert!(on_disk <= (16 << 10) + 128, "{on_disk} bytes on disk");
        let mut view = LogView::open(&path).expect("view");
        assert_eq!(view.end(), written, "logical offsets count every byte");
        let text = String::from_utf8(view.read_all().expect("read")).expect("utf8");
        assert!(text.starts_with(&marker(view.start())), "{}", &text[..80]);
        assert!(text.ends_with("line 09999\n"));
        let kept = text.len() as u64 - marker(view.start()).len() as u64;
        assert!(
            kept >= (8 << 10) - 128,
            "the newest half or more is kept: {kept}"
        );
        assert_eq!(kept, written - view.start());
        // No line is lost or doubled between the halves.
        let first: u32 = text
            .lines()
            .nth(2)
            .and_then(|l| l[5..].parse().ok())
            .expect("n");
        for (n, line) in text.lines().skip(2).enumerate() {
            assert_eq!(line, format!("line {:05}", first + n as u32));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reopened_log_continues_its_count_and_one_big_write_is_split() {
        let dir = temp("resume");
        let path = dir.join("output.log");
        let mut log = Log::open(path.clone(), 8 << 10, false).expect("open");
        log.write(&vec![b'a'; 20_000]);
        drop(log);
        let before = LogView::open(&path).expect("view");
        assert_eq!(before.end(), 20_000);
        let mut log = Log::open(path.clone(), 8 << 10, false).expect("reopen");
        log.write(&vec![b'b'; 10_000]);
        let view = LogView::open(&path).expect("view");
        assert_eq!(view.end(), 30_000);
        assert!(view.start() >= 30_000 - 8192 && view.start() <= 30_000 - 4000);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! An agent's output log as it lies on disk, shared by its writer (the shim) and every
//! reader (`grove logs`, `grove top`, `agent.logs`).
//!
//! The log is kept within `log_max` in two halves: once `output.log` reaches half of
//! it, the shim renames it to `output.log.old` (the older half it replaces is dropped)
//! and starts a new `output.log` whose first line is a marker counting every byte of
//! output dropped so far. So the disk holds at most `log_max` (plus a marker line) and
//! a reader always finds the newest half or more.
//!
//! Readers see one stream of *logical* offsets: the agent's output since it started,
//! of which the first [`LogView::start`] bytes were dropped. The marker of the current
//! file counts what was dropped before `.old`, so a reader that opens `.old` and then
//! the current file knows where its first byte lies, and offsets a follower holds stay
//! valid across a rotation.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const MARKER_PREFIX: &str = "[grove: ";
const MARKER_SUFFIX: &str = " bytes of older output dropped (log_max)]\n";

/// The older half beside the log at `current`.
pub fn old_path(current: &Path) -> PathBuf {
    let mut name = current.as_os_str().to_owned();
    name.push(".old");
    PathBuf::from(name)
}

/// The first line of a new half: `dropped` bytes of output before the older half are
/// gone.
pub fn marker(dropped: u64) -> String {
    format!("{MARKER_PREFIX}{dropped}{MARKER_SUFFIX}")
}

/// What a marker line at the start of `bytes` counts, and the line's length.
fn parse_marker(bytes: &[u8]) -> Option<(u64, usize)> {
    let rest = bytes.strip_prefix(MARKER_PREFIX.as_bytes())?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest_after = &rest[digits..];
    if digits == 0 || !rest_after.starts_with(MARKER_SUFFIX.as_bytes()) {
        return None;
    }
    let dropped = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    Some((dropped, MARKER_PREFIX.len() + digits + MARKER_SUFFIX.len()))
}

/// One file of the log: its output after any marker line.
struct Part {
    file: File,
    /// Where its output begins in the file (past the marker).
    skip: u64,
    len: u64,
    /// What its marker counts, if it has one.
    dropped: Option<u64>,
    /// Device and inode: which file it is, whatever its name is now.
    identity: (u64, u64),
}

impl Part {
    fn open(path: &Path) -> io::Result<Option<Part>> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let identity = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        let mut head = [0u8; 80];
        let mut filled = 0;
        while filled < head.len() {
            match file.read(&mut head[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        let (dropped, skip) = match parse_marker(&head[..filled]) {
            Some((dropped, len)) => (Some(dropped), len as u64),
            None => (None, 0),
        };
        Ok(Some(Part {
            len: meta.len().saturating_sub(skip),
            file,
            skip,
            dropped,
            identity,
        }))
    }
}

/// Which file `path` names now (device, inode); none when it names none.
fn identity_of(path: &Path) -> io::Result<Option<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some((meta.dev(), meta.ino()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The log's two halves, opened together.
pub struct LogView {
    start: u64,
    parts: Vec<Part>,
}

impl LogView {
    /// Opens the log whose current file is `current` (a log that is not there reads as
    /// empty).
    pub fn open(current: &Path) -> io::Result<LogView> {
        // The current file, the older half, then the current file's name again: only
        // if it still names the file opened first did no rotation come in between (a
        // fast writer fills a half in moments, so two can: the "older" half is then
        // newer than the current one). Otherwise read again.
        for _ in 0..8 {
            let Some(now) = Part::open(current)? else {
                return Ok(LogView {
                    start: 0,
                    parts: Vec::new(),
                });
            };
            let old = Part::open(&old_path(current))?;
            let still = identity_of(current)?;
            if still != Some(now.identity)
                || old.as_ref().is_some_and(|o| o.identity == now.identity)
            {
                continue;
            }
            let start = now.dropped.unwrap_or(0);
            let mut parts: Vec<Part> = old.into_iter().collect();
            parts.push(now);
            return Ok(LogView { start, parts });
        }
        Err(io::Error::other(
            "the log kept rotating while it was read; try again",
        ))
    }

    /// Where a writer resumes: the output dropped before the older half, the older
    /// half's output (`None`: no older half), and the current file's size and marker.
    pub fn resume(&self) -> (u64, Option<u64>, u64, u64) {
        let current = self.parts.last();
        let old = (self.parts.len() == 2).then(|| self.parts[0].len);
        let (len, skip) = current.map_or((0, 0), |p| (p.len + p.skip, p.skip));
        (self.start, old, len, skip)
    }

    /// The logical offset of the first byte still kept: the output dropped so far.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The logical offset just past the last byte written.
    pub fn end(&self) -> u64 {
        self.start + self.parts.iter().map(|p| p.len).sum::<u64>()
    }

    /// Up to `max` bytes from logical `offset` (moved up to [`Self::start`] when it
    /// lies in what was dropped), and the offset they begin at.
    pub fn read(&mut self, offset: u64, max: u64) -> io::Result<(u64, Vec<u8>)> {
        let from = offset.max(self.start);
        let mut at = from - self.start;
        let mut bytes = Vec::new();
        for part in &mut self.parts {
            if bytes.len() as u64 >= max {
                break;
            }
            if at >= part.len {
                at -= part.len;
                continue;
            }
            part.file.seek(SeekFrom::Start(part.skip + at))?;
            let want = (part.len - at).min(max - bytes.len() as u64);
            (&mut part.file).take(want).read_to_end(&mut bytes)?;
            at = 0;
        }
        Ok((from, bytes))
    }

    /// Everything kept, led by the marker when output was dropped.
    pub fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let (_, bytes) = self.read(0, u64::MAX)?;
        Ok(self.with_marker(0, bytes))
    }

    /// `bytes` read for a reader at `offset`, led by the marker when the read skipped
    /// dropped output.
    pub fn with_marker(&self, offset: u64, bytes: Vec<u8>) -> Vec<u8> {
        if offset >= self.start {
            return bytes;
        }
        let mut out = marker(self.start).into_bytes();
        out.extend_from_slice(&bytes);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("grove-agent-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn a_marker_reads_back() {
        let line = marker(1234);
        assert_eq!(parse_marker(line.as_bytes()), Some((1234, line.len())));
        assert_eq!(
            parse_marker(b"[grove: 12 bytes of output are missing"),
            None
        );
        assert_eq!(parse_marker(b"hello"), None);
    }

    #[test]
    fn the_two_halves_read_as_one_stream_from_the_dropped_offset() {
        let dir = dir("halves");
        let log = dir.join("output.log");
        std::fs::write(old_path(&log), format!("{}bbbb", marker(100))).expect("old");
        std::fs::write(&log, format!("{}cccc", marker(104))).expect("current");
        let mut view = LogView::open(&log).expect("open");
        assert_eq!((view.start(), view.end()), (104, 112));
        let (from, bytes) = view.read(0, 5).expect("read");
        assert_eq!((from, bytes.as_slice()), (104, &b"bbbbc"[..]));
        let (from, bytes) = view.read(110, 100).expect("read");
        assert_eq!((from, bytes.as_slice()), (110, &b"cc"[..]));
        let all = String::from_utf8(view.read_all().expect("all")).expect("utf8");
        assert_eq!(all, format!("{}bbbbcccc", marker(104)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_log_never_rotated_or_missing_reads_plainly() {
        let dir = dir("plain");
        let log = dir.join("output.log");
        let view = LogView::open(&log).expect("open missing");
        assert_eq!(view.end(), 0);
        std::fs::write(&log, "just this").expect("write");
        let mut view = LogView::open(&log).expect("open");
        assert_eq!(view.read_all().expect("all"), b"just this");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

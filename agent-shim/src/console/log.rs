//! The agent's log as the console writes it: output that cannot be stored (a full disk)
//! is never dropped without a word. The next write that succeeds is preceded by a line
//! saying how many bytes are missing there and why.

use std::fs::File;
use std::io::{self, Write};

pub struct Log {
    file: File,
    /// Bytes of output not stored since the last successful write, and why.
    unsaved: u64,
    cause: Option<io::Error>,
}

impl Log {
    pub fn new(file: File) -> Log {
        Log {
            file,
            unsaved: 0,
            cause: None,
        }
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
            if let Err(e) = self.file.write_all(gap.as_bytes()) {
                self.lost(bytes.len(), e);
                return;
            }
            self.unsaved = 0;
            self.cause = None;
        }
        if let Err(e) = self.file.write_all(bytes) {
            // A partial write is counted whole: the gap line may stand a little early.
            self.lost(bytes.len(), e);
        }
    }

    fn lost(&mut self, len: usize, cause: io::Error) {
        self.unsaved += len as u64;
        self.cause = Some(cause);
    }
}

#[cfg(test)]
mod tests {
    use super::Log;

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
        log.file = std::fs::File::create(&path).expect("create");
        log.write(b"back");
        let text = std::fs::read_to_string(&path).expect("read");
        let _ = std::fs::remove_file(&path);
        assert!(text.contains("16 bytes of output are missing"), "{text}");
        assert!(text.contains("No space left on device"), "{text}");
        assert!(text.ends_with("back"), "{text}");
        assert_eq!(log.unsaved, 0);
    }
}

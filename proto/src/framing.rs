//! Line framing with a hard cap, enforced while reading so that an endless line can
//! never make either side allocate more than the cap.

use std::io::{self, BufRead};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What one read produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, newline stripped.
    Line(Vec<u8>),
    /// A line longer than the cap; its bytes were discarded up to and including its newline
    /// (or up to end of stream).
    TooLong,
    /// End of stream. `partial` is true when the stream ended in the middle of a line.
    Eof { partial: bool },
}

/// Accumulates bytes for one line; shared by the blocking and the async readers.
struct LineState {
    buf: Vec<u8>,
    overflowed: bool,
    cap: usize,
}

impl LineState {
    fn new(cap: usize) -> Self {
        LineState {
            buf: Vec::new(),
            overflowed: false,
            cap,
        }
    }

    /// Takes bytes from `available` (what the reader's buffer holds: empty only at end
    /// of stream); returns how many were consumed and the finished frame, if the line
    /// ended inside them.
    fn feed(&mut self, available: &[u8]) -> (usize, Option<Frame>) {
        if available.is_empty() {
            return (0, Some(self.eof()));
        }
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !self.overflowed {
            if self.buf.len() + chunk.len() > self.cap {
                self.overflowed = true;
                self.buf = Vec::new();
            } else {
                self.buf.extend_from_slice(chunk);
            }
        }
        match done {
            Some(consumed) => (consumed, Some(self.finish())),
            None => (available.len(), None),
        }
    }

    fn finish(&mut self) -> Frame {
        if std::mem::take(&mut self.overflowed) {
            self.buf.clear();
            Frame::TooLong
        } else {
            let mut line = std::mem::take(&mut self.buf);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            Frame::Line(line)
        }
    }

    fn eof(&mut self) -> Frame {
        if self.overflowed {
            self.overflowed = false;
            return Frame::TooLong;
        }
        Frame::Eof {
            partial: !std::mem::take(&mut self.buf).is_empty(),
        }
    }
}

/// Reads one capped line from a blocking reader.
pub fn read_frame<R: BufRead>(reader: &mut R, cap: usize) -> io::Result<Frame> {
    let mut state = LineState::new(cap);
    loop {
        let (consumed, frame) = state.feed(reader.fill_buf()?);
        reader.consume(consumed);
        if let Some(frame) = frame {
            return Ok(frame);
        }
    }
}

/// Reads one capped line from an async reader. Cancel-safe only between calls.
pub async fn read_frame_async<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    cap: usize,
) -> io::Result<Frame> {
    let mut state = LineState::new(cap);
    loop {
        let (consumed, frame) = state.feed(reader.fill_buf().await?);
        reader.consume(consumed);
        if let Some(frame) = frame {
            return Ok(frame);
        }
    }
}

/// Serializes a message as one line, newline included.
pub fn encode_line<T: serde::Serialize>(message: &T) -> Vec<u8> {
    // Serializing our own wire types cannot fail: they hold no maps with non-string keys.
    let mut line = serde_json::to_vec(message).unwrap_or_else(|_| b"null".to_vec());
    line.push(b'\n');
    line
}

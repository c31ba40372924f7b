//! The console socket between the daemon and an agent's shim: how the daemon reaches
//! the terminal (or the kept-open stdin) the shim holds for the agent's whole life.
//! The shim answers only the process that holds the daemon's lock.
//!
//! Binary frames, because terminal output is bytes and the hot path is one keystroke:
//! one tag byte, a little-endian u32 length, then the payload.

use crate::types::TtySize;

/// Largest frame payload either side sends or accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// The file name of the console socket in the agent's state directory.
pub const SOCKET_FILE: &str = "console.sock";

/// A tty agent's last screen, beside its exit record, written by its shim as it ends:
/// the screen that often says why it stopped outlives the console.
pub const LAST_SCREEN_FILE: &str = "last-screen.json";

/// What [`LAST_SCREEN_FILE`] holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct LastScreen {
    pub size: TtySize,
    /// Row and column of the cursor, from 0.
    pub cursor: (u16, u16),
    /// Rows separated by newlines (trailing blanks trimmed).
    pub text: String,
    /// The same with the escape sequences for colours and attributes.
    pub ansi: String,
}

/// What the daemon asks of the shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToShim {
    /// Bytes for the agent's terminal (or stdin), answered with `Accepted`.
    Input(Vec<u8>),
    /// Keys typed in an attached terminal: the same without an answer, so that the
    /// keystroke's path carries nothing but the key and its echo.
    Keys(Vec<u8>),
    Resize(TtySize),
    /// The current screen as text (`ansi`: with colours and attributes).
    Screen {
        ansi: bool,
    },
    /// Redraw sequence of the current screen, then every byte of output as it comes.
    Watch,
    /// Sent with a terminal attached (SCM_RIGHTS): the shim itself draws the screen on
    /// it, writes the agent's output to it and reads keys from it, as tmux's server
    /// does with its clients' terminals, so that a keystroke and its echo pass through
    /// no process but the shim. The detach key (and Ctrl-C for a `read_only` viewer)
    /// lets go of the terminal and answers `Detached`.
    WatchTerminal {
        read_only: bool,
        detach: u8,
    },
    /// The agent's activity now and at every change.
    Activity,
    /// No more input: close the agent's stdin (pipes only).
    CloseInput,
}

/// What the shim tells the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromShim {
    Output(Vec<u8>),
    /// The answer to `Watch`: the screen redrawn on an empty terminal.
    Snapshot {
        size: TtySize,
        data: Vec<u8>,
    },
    Screen {
        size: TtySize,
        cursor: (u16, u16),
        text: Vec<u8>,
    },
    /// True: waiting for input; false: working.
    Activity(bool),
    /// Input was accepted (so many bytes).
    Accepted(u64),
    /// A request the shim could not do, and why.
    Refused(String),
    /// The detach key was typed on a terminal given with `WatchTerminal`: the shim has
    /// written all it owed it and let go of it.
    Detached,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("console frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLarge(usize),
    #[error("unknown console frame tag {0:#x}")]
    UnknownTag(u8),
    #[error("malformed console frame {0:#x}")]
    Malformed(u8),
}

fn frame(tag: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

fn size_bytes(size: TtySize) -> [u8; 4] {
    let [r0, r1] = size.rows.to_le_bytes();
    let [c0, c1] = size.cols.to_le_bytes();
    [r0, r1, c0, c1]
}

fn read_size(bytes: &[u8]) -> Option<TtySize> {
    Some(TtySize {
        rows: u16::from_le_bytes(bytes.get(0..2)?.try_into().ok()?),
        cols: u16::from_le_bytes(bytes.get(2..4)?.try_into().ok()?),
    })
}

/// Splits the first complete frame off `buf`: `Ok(None)` until one is there.
fn split(buf: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>, FrameError> {
    let Some(header) = buf.get(..5) else {
        return Ok(None);
    };
    let tag = header[0];
    let len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    if buf.len() < 5 + len {
        return Ok(None);
    }
    let payload = buf[5..5 + len].to_vec();
    buf.drain(..5 + len);
    Ok(Some((tag, payload)))
}

impl ToShim {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ToShim::Input(bytes) => frame(b'i', bytes, out),
            ToShim::Keys(bytes) => frame(b'K', bytes, out),
            ToShim::Resize(size) => frame(b'r', &size_bytes(*size), out),
            ToShim::Screen { ansi } => frame(b's', &[u8::from(*ansi)], out),
            ToShim::Watch => frame(b'w', &[], out),
            ToShim::WatchTerminal { read_only, detach } => {
                frame(b'W', &[u8::from(*read_only), *detach], out)
            }
            ToShim::Activity => frame(b'a', &[], out),
            ToShim::CloseInput => frame(b'c', &[], out),
        }
    }

    pub fn decode(buf: &mut Vec<u8>) -> Result<Option<ToShim>, FrameError> {
        let Some((tag, payload)) = split(buf)? else {
            return Ok(None);
        };
        let message = match tag {
            b'i' => ToShim::Input(payload),
            b'K' => ToShim::Keys(payload),
            b'r' => ToShim::Resize(read_size(&payload).ok_or(FrameError::Malformed(tag))?),
            b's' => ToShim::Screen {
                ansi: payload.first() == Some(&1),
            },
            b'w' => ToShim::Watch,
            b'W' => match payload.as_slice() {
                [read_only, detach] => ToShim::WatchTerminal {
                    read_only: *read_only == 1,
                    detach: *detach,
                },
                _ => return Err(FrameError::Malformed(tag)),
            },
            b'a' => ToShim::Activity,
            b'c' => ToShim::CloseInput,
            other => return Err(FrameError::UnknownTag(other)),
        };
        Ok(Some(message))
    }
}

impl FromShim {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            FromShim::Output(bytes) => frame(b'o', bytes, out),
            FromShim::Snapshot { size, data } => {
                let mut payload = size_bytes(*size).to_vec();
                payload.extend_from_slice(data);
                frame(b'n', &payload, out)
            }
            FromShim::Screen { size, cursor, text } => {
                let mut payload = size_bytes(*size).to_vec();
                payload.extend_from_slice(&cursor.0.to_le_bytes());
                payload.extend_from_slice(&cursor.1.to_le_bytes());
                payload.extend_from_slice(text);
                frame(b'S', &payload, out)
            }
            FromShim::Activity(waiting) => frame(b'A', &[u8::from(*waiting)], out),
            FromShim::Accepted(bytes) => frame(b'k', &bytes.to_le_bytes(), out),
            FromShim::Refused(why) => frame(b'x', why.as_bytes(), out),
            FromShim::Detached => frame(b'D', &[], out),
        }
    }

    pub fn decode(buf: &mut Vec<u8>) -> Result<Option<FromShim>, FrameError> {
        let Some((tag, payload)) = split(buf)? else {
            return Ok(None);
        };
        let malformed = FrameError::Malformed(tag);
        let message = match tag {
            b'o' => FromShim::Output(payload),
            b'n' => FromShim::Snapshot {
                size: read_size(&payload).ok_or(malformed)?,
                data: payload[4..].to_vec(),
            },
            b'S' => {
                let size = read_size(&payload).ok_or(malformed.clone())?;
                let cursor = read_size(payload.get(4..).ok_or(malformed)?)
                    .map(|c| (c.rows, c.cols))
                    .ok_or(FrameError::Malformed(tag))?;
                FromShim::Screen {
                    size,
                    cursor,
                    text: payload[8..].to_vec(),
                }
            }
            b'A' => FromShim::Activity(payload.first() == Some(&1)),
            b'k' => FromShim::Accepted(u64::from_le_bytes(
                payload.as_slice().try_into().map_err(|_| malformed)?,
            )),
            b'x' => FromShim::Refused(String::from_utf8_lossy(&payload).into_owned()),
            b'D' => FromShim::Detached,
            other => return Err(FrameError::UnknownTag(other)),
        };
        Ok(Some(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_survives_the_round_trip_even_split_in_pieces() {
        let size = TtySize {
            rows: 40,
            cols: 120,
        };
        let to = [
            ToShim::Input(b"ls\r".to_vec()),
            ToShim::Keys(b"q".to_vec()),
            ToShim::Resize(size),
            ToShim::Screen { ansi: true },
            ToShim::Watch,
            ToShim::WatchTerminal {
                read_only: true,
                detach: 0x1d,
            },
            ToShim::Activity,
            ToShim::CloseInput,
        ];
        let from = [
            FromShim::Output(vec![0, 27, 255]),
            FromShim::Snapshot {
                size,
                data: b"\x1b[H".to_vec(),
            },
            FromShim::Screen {
                size,
                cursor: (3, 7),
                text: b"$ ".to_vec(),
            },
            FromShim::Activity(true),
            FromShim::Accepted(9),
            FromShim::Refused("no".into()),
            FromShim::Detached,
        ];
        let mut wire = Vec::new();
        to.iter().for_each(|m| m.encode(&mut wire));
        let mut buf = Vec::new();
        let mut got = Vec::new();
        for byte in wire {
            buf.push(byte);
            while let Some(m) = ToShim::decode(&mut buf).expect("valid") {
                got.push(m);
            }
        }
        assert_eq!(got, to);
        let mut wire = Vec::new();
        from.iter().for_each(|m| m.encode(&mut wire));
        let mut got = Vec::new();
        while let Some(m) = FromShim::decode(&mut wire).expect("valid") {
            got.push(m);
        }
        assert_eq!(got, from);
    }

    #[test]
    fn a_huge_length_is_an_error_not_an_allocation() {
        let mut buf = vec![b'i', 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            ToShim::decode(&mut buf),
            Err(FrameError::TooLarge(u32::MAX as usize))
        );
    }
}

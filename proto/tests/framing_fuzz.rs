//! Tests of the line framing: examples, then property tests at fuzzing strength (any
//! bytes, cut into any chunks, are framed without panics, never beyond the cap, and
//! exactly as a model says). PROPTEST_CASES raises the count (CI runs the default,
//! bounded in time).

use grove_proto::framing::{read_frame, Frame};
use proptest::prelude::*;
use std::io::{BufReader, Read};

/// A reader that hands out its bytes in the given chunk sizes.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    turn: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let size = self.sizes[self.turn % self.sizes.len()].max(1);
        self.turn += 1;
        let n = size.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// What framing must produce, computed the obvious way: the cap counts the raw line
/// (a trailing CR included), a trailing CR is then dropped.
fn model(data: &[u8], cap: usize) -> Vec<Frame> {
    let mut parts: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let tail = parts.pop().unwrap_or(&[]);
    let mut frames: Vec<Frame> = parts
        .into_iter()
        .map(|raw| {
            if raw.len() > cap {
                Frame::TooLong
            } else {
                Frame::Line(raw.strip_suffix(b"\r").unwrap_or(raw).to_vec())
            }
        })
        .collect();
    if tail.len() > cap {
        frames.push(Frame::TooLong);
        frames.push(Frame::Eof { partial: false });
    } else {
        frames.push(Frame::Eof {
            partial: !tail.is_empty(),
        });
    }
    frames
}

fn frames(data: &[u8], sizes: Vec<usize>, cap: usize, buffer: usize) -> Vec<Frame> {
    let reader = Chunked {
        data: data.to_vec(),
        at: 0,
        sizes,
        turn: 0,
    };
    let mut reader = BufReader::with_capacity(buffer, reader);
    let mut out = Vec::new();
    loop {
        let frame = read_frame(&mut reader, cap).expect("read");
        let end = matches!(frame, Frame::Eof { .. });
        out.push(frame);
        if end {
            return out;
        }
    }
}

/// `input` read through a 3-byte buffer, 3 bytes at a time.
fn small_reads(input: &[u8], cap: usize) -> Vec<Frame> {
    frames(input, vec![3], cap, 3)
}

#[test]
fn splits_lines_across_small_buffers() {
    assert_eq!(
        small_reads(b"ab\r\ncdef\n", 10),
        vec![
            Frame::Line(b"ab".to_vec()),
            Frame::Line(b"cdef".to_vec()),
            Frame::Eof { partial: false }
        ]
    );
}

#[test]
fn overlong_line_is_reported_and_skipped() {
    assert_eq!(
        small_reads(b"0123456789ABC\nok\n", 10),
        vec![
            Frame::TooLong,
            Frame::Line(b"ok".to_vec()),
            Frame::Eof { partial: false }
        ]
    );
}

#[test]
fn line_of_exactly_the_cap_is_accepted() {
    assert_eq!(
        small_reads(b"0123456789\n", 10)[0],
        Frame::Line(b"0123456789".to_vec())
    );
}

#[test]
fn half_a_line_then_eof_is_partial() {
    assert_eq!(
        small_reads(b"{\"a\":", 10),
        vec![Frame::Eof { partial: true }]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn any_bytes_in_any_chunks_frame_like_the_model(
        data in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>()], 0..600),
        sizes in proptest::collection::vec(1usize..40, 1..8),
        cap in 1usize..64,
        buffer in 1usize..32,
    ) {
        let got = frames(&data, sizes, cap, buffer);
        prop_assert_eq!(got.clone(), model(&data, cap));
        for frame in got {
            if let Frame::Line(line) = frame {
                prop_assert!(line.len() <= cap);
            }
        }
    }

    #[test]
    fn json_rpc_lines_decode_or_fail_without_panic(text in "\\PC{0,200}") {
        let _ = serde_json::from_str::<grove_proto::Request>(&text);
        let _ = serde_json::from_str::<grove_proto::Response>(&text);
    }
}

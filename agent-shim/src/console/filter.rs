//! What of the agent's output may reach a viewer's terminal. An agent is untrusted: its
//! bytes must not read or write the viewer's clipboard (OSC 52), set the title or ask
//! the terminal anything, because a terminal answers as if the user typed it, into the
//! agent while attached and into the user's shell after detach. So, as tmux does, the
//! viewer gets the drawing (text, SGR, cursor moves, erases, modes) and none of: OSC
//! (but links and the title when the user opted in), DCS, APC, SOS, PM, screen's title
//! string, and the CSI and ESC sequences that make the terminal report.
//!
//! The filter is a streaming state machine: a sequence split across two reads of the
//! terminal is judged whole. Dropped queries are handed back (see [`Dropped`]) so that
//! the shim can answer them itself (`answers`).

/// A CSI longer than this is nothing a terminal would act on sensibly: dropped whole.
const MAX_CSI: usize = 256;
/// How much of a dropped sequence is kept for `answers`: every query it answers is
/// shorter; a longer one (a clipboard write) is not a query.
const MAX_CAPTURE: usize = 64;
/// An OSC's number is judged once this much of it is seen.
const MAX_OSC_NUMBER: usize = 8;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Str {
    /// An OSC whose number is still being read (kept in `held`).
    OscNumber,
    /// An OSC the viewer may have: passed on as it comes.
    OscKept,
    /// Any other string (OSC, DCS, APC, SOS, PM, ESC k): swallowed.
    Dropped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Escape,
    /// After ESC and intermediates (ESC ( B, ESC # 8): one more byte ends it.
    EscapeIntermediate,
    /// Inside a CSI, held until its final byte says what it is.
    Csi,
    /// Inside a CSI too long to hold: swallowed up to its final byte.
    CsiIgnored,
    /// Inside a string; `escape`: its last byte was ESC (ST may follow).
    String {
        kind: Str,
        escape: bool,
    },
    /// After 0xC2 in text: 0x80-0x9F next is a C1 control written in UTF-8.
    Utf8C1,
}

/// A sequence the filter dropped that may be a query: its start normalized to 7 bits
/// (`ESC [`, `ESC ]`, `ESC P`), its terminator kept for strings (BEL or `ESC \`).
pub struct Dropped {
    /// Offset in the chunk just past the sequence's last byte.
    pub end: usize,
    pub bytes: Vec<u8>,
}

pub struct Filter {
    state: State,
    links: bool,
    title: bool,
    /// The CSI or OSC number being judged (7-bit start included).
    held: Vec<u8>,
    /// The start of the dropped string, for `answers`; `None` past [`MAX_CAPTURE`].
    capture: Option<Vec<u8>>,
    /// UTF-8 continuation bytes still expected in text: 0x80-0x9F then are text, not C1.
    continuation: u8,
}

impl Filter {
    pub fn new(links: bool, title: bool) -> Filter {
        Filter {
            state: State::Ground,
            links,
            title,
            held: Vec::new(),
            capture: None,
            continuation: 0,
        }
    }

    /// Appends to `out` what of `input` the viewer may see, and to `dropped` the
    /// sequences that could be queries.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>, dropped: &mut Vec<Dropped>) {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Ground && self.continuation == 0 {
                // Plain ASCII text, most of any output, is copied a run at a time.
                let run = input[i..]
                    .iter()
                    .position(|&b| b == ESC || b >= 0x80)
                    .unwrap_or(input.len() - i);
                out.extend_from_slice(&input[i..i + run]);
                i += run;
                if i == input.len() {
                    break;
                }
            }
            self.byte(input[i], i + 1, out, dropped);
            i += 1;
        }
    }

    fn byte(&mut self, b: u8, end: usize, out: &mut Vec<u8>, dropped: &mut Vec<Dropped>) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::Utf8C1 => {
                self.state = State::Ground;
                if (0x80..=0x9f).contains(&b) {
                    self.c1(b, out);
                } else {
                    out.push(0xc2);
                    self.ground(b, out);
                }
            }
            State::Escape => self.escape(b, end, out, dropped),
            State::EscapeIntermediate => {
                if (0x20..=0x2f).contains(&b) {
                    out.push(b);
                } else if b == ESC {
                    self.state = State::Escape;
                } else if b == CAN || b == SUB {
                    self.state = State::Ground;
                } else if b < 0x20 {
                    out.push(b);
                } else {
                    out.push(b);
                    self.state = State::Ground;
                }
            }
            State::Csi => self.csi(b, end, out, dropped),
            State::CsiIgnored => match b {
                ESC => self.state = State::Escape,
                CAN | SUB | 0x40..=0x7e => self.state = State::Ground,
                _ => {}
            },
            State::String { kind, escape } => self.string(kind, escape, b, end, out, dropped),
        }
    }

    fn ground(&mut self, b: u8, out: &mut Vec<u8>) {
        if b == ESC {
            self.continuation = 0;
            self.state = State::Escape;
            return;
        }
        if self.continuation > 0 && (0x80..=0xbf).contains(&b) {
            self.continuation -= 1;
            out.push(b);
            return;
        }
        self.continuation = match b {
            0xc2 => {
                self.state = State::Utf8C1;
                return;
            }
            0xc3..=0xdf => 1,
            0xe0..=0xef => 2,
            0xf0..=0xf4 => 3,
            _ => 0,
        };
        if (0x80..=0x9f).contains(&b) {
            // A lone 8-bit C1 control: a terminal not in UTF-8 mode acts on it.
            self.c1(b, out);
            return;
        }
        out.push(b);
    }

    /// A C1 control (8-bit or in UTF-8): the same as its ESC form.
    fn c1(&mut self, b: u8, out: &mut Vec<u8>) {
        match b {
            0x9b => self.start_csi(),
            0x9d => self.start_osc(),
            0x90 | 0x98 | 0x9e | 0x9f => self.start_dropped(b - 0x40),
            // The rest (NEL, IND, HTS, ...) move the cursor at most; their 7-bit forms
            // say the same to every terminal.
            _ => out.extend_from_slice(&[ESC, b - 0x40]),
        }
    }

    fn escape(&mut self, b: u8, end: usize, out: &mut Vec<u8>, dropped: &mut Vec<Dropped>) {
        match b {
            b'[' => self.start_csi(),
            b']' => self.start_osc(),
            b'P' | b'X' | b'^' | b'_' | b'k' => self.start_dropped(b),
            // DECID: the old way to ask for the device attributes.
            b'Z' => {
                self.state = State::Ground;
                dropped.push(Dropped {
                    end,
                    bytes: vec![ESC, b'[', b'c'],
                });
            }
            ESC => {}
            CAN | SUB => self.state = State::Ground,
            0x20..=0x2f => {
                out.extend_from_slice(&[ESC, b]);
                self.state = State::EscapeIntermediate;
            }
            0x00..=0x1f | 0x7f => out.push(b),
            _ => {
                out.extend_from_slice(&[ESC, b]);
                self.state = State::Ground;
            }
        }
    }

    fn start_csi(&mut self) {
        self.held.clear();
        self.held.extend_from_slice(&[ESC, b'[']);
        self.state = State::Csi;
    }

    fn start_osc(&mut self) {
        self.held.clear();
        self.held.extend_from_slice(&[ESC, b']']);
        self.state = State::String {
            kind: Str::OscNumber,
            escape: false,
        };
    }

    fn start_dropped(&mut self, introducer: u8) {
        self.capture = Some(vec![ESC, introducer]);
        self.state = State::String {
            kind: Str::Dropped,
            escape: false,
        };
    }

    fn csi(&mut self, b: u8, end: usize, out: &mut Vec<u8>, dropped: &mut Vec<Dropped>) {
        match b {
            ESC => self.state = State::Escape,
            CAN | SUB => self.state = State::Ground,
            // Controls inside a CSI act at once (a terminal does the same).
            0x00..=0x1f => out.push(b),
            0x20..=0x3f => {
                self.held.push(b);
                if self.held.len() > MAX_CSI {
                    self.held.clear();
                    self.state = State::CsiIgnored;
                }
            }
            0x40..=0x7e => {
                self.held.push(b);
                self.state = State::Ground;
                if asks_terminal(&self.held[2..]) {
                    dropped.push(Dropped {
                        end,
                        bytes: std::mem::take(&mut self.held),
                    });
                } else {
                    out.extend_from_slice(&self.held);
                }
                self.held.clear();
            }
            _ => {}
        }
    }

    fn string(
        &mut self,
        kind: Str,
        escape: bool,
        b: u8,
        end: usize,
        out: &mut Vec<u8>,
        dropped: &mut Vec<Dropped>,
    ) {
        let terminator: Option<&[u8]> = if escape && b == b'\\' {
            Some(b"\x1b\\")
        } else if b == BEL {
            Some(b"\x07")
        } else {
            None
        };
        if let Some(terminator) = terminator {
            self.end_string(kind, Some(terminator), end, out, dropped);
            return;
        }
        if escape {
            // ESC then anything but `\`: the string is over, and a new escape begins.
            self.end_string(kind, None, end, out, dropped);
            self.state = State::Escape;
            self.escape(b, end, out, dropped);
            return;
        }
        match b {
            ESC => {
                self.state = State::String { kind, escape: true };
                return;
            }
            CAN | SUB => {
                self.end_string(kind, None, end, out, dropped);
                return;
            }
            _ => {}
        }
        match kind {
            Str::OscNumber => {
                self.held.push(b);
                if b == b';' || !b.is_ascii_digit() || self.held.len() > MAX_OSC_NUMBER + 2 {
                    self.judge_osc(out);
                }
            }
            Str::OscKept => out.push(b),
            Str::Dropped => {
                if let Some(capture) = &mut self.capture {
                    if capture.len() < MAX_CAPTURE {
                        capture.push(b);
                    } else {
                        self.capture = None;
                    }
                }
            }
        }
    }

    /// The OSC's number is known: pass it on from here, or swallow it.
    fn judge_osc(&mut self, out: &mut Vec<u8>) {
        let number = &self.held[2..self.held.len() - 1];
        let keep = self.held.last() == Some(&b';')
            && match number {
                b"8" => self.links,
                b"0" | b"1" | b"2" => self.title,
                _ => false,
            };
        let kind = if keep {
            out.extend_from_slice(&self.held);
            Str::OscKept
        } else {
            self.capture = Some(std::mem::take(&mut self.held));
            Str::Dropped
        };
        self.held.clear();
        self.state = State::String {
            kind,
            escape: false,
        };
    }

    fn end_string(
        &mut self,
        kind: Str,
        terminator: Option<&[u8]>,
        end: usize,
        out: &mut Vec<u8>,
        dropped: &mut Vec<Dropped>,
    ) {
        self.state = State::Ground;
        match kind {
            // A kept OSC is closed for the viewer however it ended, so that the
            // terminal is never left inside it.
            Str::OscKept => out.extend_from_slice(terminator.unwrap_or(b"\x1b\\")),
            Str::OscNumber => {
                let capture = std::mem::take(&mut self.held);
                self.report(capture, terminator, end, dropped);
            }
            Str::Dropped => {
                if let Some(capture) = self.capture.take() {
                    self.report(capture, terminator, end, dropped);
                }
            }
        }
    }

    fn report(
        &mut self,
        mut capture: Vec<u8>,
        terminator: Option<&[u8]>,
        end: usize,
        dropped: &mut Vec<Dropped>,
    ) {
        // Only a properly ended string is a query a terminal would have answered.
        if let Some(terminator) = terminator {
            capture.extend_from_slice(terminator);
            dropped.push(Dropped {
                end,
                bytes: capture,
            });
        }
    }
}

/// Whether a CSI (without its `ESC [`) asks the terminal to report something, or
/// acts on the viewer's window rather than the screen.
fn asks_terminal(body: &[u8]) -> bool {
    let Some((&last, rest)) = body.split_last() else {
        return false;
    };
    let private = rest.first().copied().filter(|b| (0x3c..=0x3f).contains(b));
    let intermediate = rest
        .iter()
        .rev()
        .find(|b| (0x20..=0x2f).contains(*b))
        .copied();
    match (last, private, intermediate) {
        // DSR (status, cursor position, and their DEC forms).
        (b'n', _, _) => true,
        // Device attributes, primary, secondary and tertiary.
        (b'c', _, None) => true,
        // Window operations: title reports (21t), sizes (14t, 18t), and moving,
        // resizing or raising the viewer's window.
        (b't', None, None) => true,
        // DECRQM, DECRQPSR, DECRQTSR.
        (b'p' | b'w' | b'u', _, Some(b'$')) => true,
        // XTVERSION.
        (b'q', Some(b'>'), None) => true,
        // DECREQTPARM.
        (b'x', None, None) => true,
        // DECRQCRA: a checksum of the screen, a way to read it.
        (b'y', _, Some(b'*')) => true,
        // XTSMGRAPHICS and the kitty keyboard query.
        (b'S', Some(b'?'), None) | (b'u', Some(b'?'), None) => true,
        // XTQMODKEYS.
        (b'm', Some(b'?'), None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(filter: &mut Filter, chunks: &[&[u8]]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        for chunk in chunks {
            let mut d = Vec::new();
            filter.feed(chunk, &mut out, &mut d);
            dropped.extend(d.into_iter().map(|d| d.bytes));
        }
        (out, dropped)
    }

    fn filtered(input: &[u8]) -> Vec<u8> {
        run(&mut Filter::new(false, false), &[input]).0
    }

    #[test]
    fn drawing_passes_unchanged() {
        let drawing: &[u8] = b"hi \x1b[1;31mred\x1b[0m\r\n\x1b[2J\x1b[H\x1b[?2004h\x1b[?1049h\
            \x1b(B\x1b#8\x1b7\x1b8\x1b[10;20H\x1b[K caf\xc3\xa9 \xe2\x94\x80 \xf0\x9f\x98\x80";
        assert_eq!(filtered(drawing), drawing);
    }

    #[test]
    fn strings_are_dropped() {
        for attack in [
            &b"\x1b]52;c;aWQ+L3RtcC94Cg==\x07"[..],
            b"\x1b]52;c;?\x1b\\",
            b"\x1b]0;pwned\x07",
            b"\x1b]2;pwned\x1b\\",
            b"\x1b]8;;http://evil/\x1b\\",
            b"\x1b]10;?\x07",
            b"\x1bP$qm\x1b\\",
            b"\x1bP+q544e\x1b\\",
            b"\x1b_Gf=100;AAAA\x1b\\",
            b"\x1b^private\x1b\\",
            b"\x1bXsos\x1b\\",
            b"\x1bkwindow name\x1b\\",
            b"\x1b]1337;File=inline=1:AAAA\x07",
        ] {
            assert_eq!(
                filtered(&[b"a", attack, b"b"].concat()),
                b"ab",
                "{attack:?}"
            );
        }
    }

    #[test]
    fn reports_are_dropped() {
        for query in [
            &b"\x1b[6n"[..],
            b"\x1b[5n",
            b"\x1b[?6n",
            b"\x1b[c",
            b"\x1b[0c",
            b"\x1b[>c",
            b"\x1b[=c",
            b"\x1b[21t",
            b"\x1b[18t",
            b"\x1b[14t",
            b"\x1b[3;0;0t",
            b"\x1b[?2004$p",
            b"\x1b[>q",
            b"\x1b[>0q",
            b"\x1bZ",
            b"\x1b[?u",
        ] {
            assert_eq!(filtered(&[b"a", query, b"b"].concat()), b"ab", "{query:?}");
        }
    }

    #[test]
    fn c1_controls_in_utf8_or_8_bit_are_judged_like_their_escapes() {
        assert_eq!(filtered(b"a\xc2\x9d52;c;?\x07b"), b"ab");
        assert_eq!(filtered(b"a\xc2\x9b6nb"), b"ab");
        assert_eq!(filtered(b"a\x9d0;t\x9c\x07b"), b"ab");
        assert_eq!(filtered(b"a\xc2\x9b1mb"), b"a\x1b[1mb");
        // A continuation byte of a character is text, not a C1 control.
        assert_eq!(filtered("Ā─ꀀ".as_bytes()), "Ā─ꀀ".as_bytes());
    }

    #[test]
    fn split_across_reads_is_judged_whole() {
        let input: &[u8] = b"x\x1b]52;c;aGVsbG8=\x1b\\y\x1b[6nz\x1b[1mw\x1bP$qm\x1b\\v\xc3\xa9";
        for cut in 0..input.len() {
            for cut2 in cut..input.len() {
                let mut filter = Filter::new(false, false);
                let (out, dropped) = run(
                    &mut filter,
                    &[&input[..cut], &input[cut..cut2], &input[cut2..]],
                );
                assert_eq!(out, b"xyz\x1b[1mwv\xc3\xa9", "cut at {cut}, {cut2}");
                assert_eq!(dropped.len(), 3, "cut at {cut}, {cut2}");
            }
        }
    }

    #[test]
    fn links_and_title_pass_when_opted_in() {
        let input: &[u8] = b"\x1b]8;;http://x/\x1b\\l\x1b]8;;\x1b\\\x1b]0;t\x07\x1b]52;c;?\x07";
        let (out, _) = run(&mut Filter::new(true, false), &[input]);
        assert_eq!(out, b"\x1b]8;;http://x/\x1b\\l\x1b]8;;\x1b\\");
        let (out, _) = run(&mut Filter::new(false, true), &[input]);
        assert_eq!(out, b"l\x1b]0;t\x07");
        // Cut short by a new escape, a kept OSC is still closed for the viewer.
        let (out, _) = run(&mut Filter::new(false, true), &[b"\x1b]2;t\x1b[1m"]);
        assert_eq!(out, b"\x1b]2;t\x1b\\\x1b[1m");
    }

    #[test]
    fn queries_are_handed_back_with_their_terminator() {
        let (_, dropped) = run(
            &mut Filter::new(false, false),
            &[b"\x1b]10;?\x07\x1b]11;?\x1b\\\x1b[6n\x1b]52;c;?\x07"],
        );
        assert_eq!(
            dropped,
            vec![
                b"\x1b]10;?\x07".to_vec(),
                b"\x1b]11;?\x1b\\".to_vec(),
                b"\x1b[6n".to_vec(),
                b"\x1b]52;c;?\x07".to_vec(),
            ]
        );
        // A long string is no query: not kept.
        let long = [b"\x1b]52;c;".as_slice(), &[b'A'; 500], b"\x07"].concat();
        let (out, dropped) = run(&mut Filter::new(false, false), &[&long]);
        assert!(out.is_empty() && dropped.is_empty());
        let long = [b"\x1b[".as_slice(), &[b'1'; 500], b"$pok"].concat();
        assert_eq!(filtered(&long), b"ok");
    }
}

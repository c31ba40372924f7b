//! The shim answers the common terminal queries itself, as tmux does: programs wait for
//! the answer to a cursor position or device attributes query (some hang without one),
//! and the viewer's terminal never sees the query (`filter`), nor is there always a
//! viewer. Answers go to the agent as input, from the screen model as it stands right
//! after the query.

/// The answer to a query the filter dropped, or `None` for what the shim does not
/// answer (a clipboard read, a title report: nothing of the viewer's is told).
pub fn answer(query: &[u8], screen: &vt100::Screen) -> Option<Vec<u8>> {
    if let Some(body) = query.strip_prefix(b"\x1b[") {
        return csi(body, screen);
    }
    let body = query.strip_prefix(b"\x1b]")?;
    let (body, terminator) = match body.strip_suffix(b"\x07") {
        Some(body) => (body, &b"\x07"[..]),
        None => (body.strip_suffix(b"\x1b\\")?, &b"\x1b\\"[..]),
    };
    // Foreground light, background dark, cursor light: what most terminals start with.
    let colour = match body {
        b"10;?" => "10;rgb:ffff/ffff/ffff",
        b"11;?" => "11;rgb:0000/0000/0000",
        b"12;?" => "12;rgb:ffff/ffff/ffff",
        _ => return None,
    };
    Some([b"\x1b]", colour.as_bytes(), terminator].concat())
}

fn csi(body: &[u8], screen: &vt100::Screen) -> Option<Vec<u8>> {
    let text = match body {
        b"6n" => {
            let (row, col) = screen.cursor_position();
            format!("\x1b[{};{}R", row + 1, col + 1)
        }
        b"?6n" => {
            let (row, col) = screen.cursor_position();
            format!("\x1b[?{};{}R", row + 1, col + 1)
        }
        b"5n" => "\x1b[0n".into(),
        // A VT220 with ANSI colour, as tmux says.
        b"c" | b"0c" => "\x1b[?62;22c".into(),
        b">c" | b">0c" => "\x1b[>0;10;1c".into(),
        b">q" | b">0q" => format!("\x1bP>|grove {}\x1b\\", env!("CARGO_PKG_VERSION")),
        b"18t" => {
            let (rows, cols) = screen.size();
            format!("\x1b[8;{rows};{cols}t")
        }
        _ => return None,
    };
    Some(text.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(query: &[u8], screen: &vt100::Screen) -> Vec<u8> {
        answer(query, screen).unwrap_or_default()
    }

    fn screen(drawn: &[u8]) -> vt100::Parser {
        let mut parser =
            vt100::Parser::new(super::super::nonzero(24), super::super::nonzero(80), 0);
        parser.process(drawn);
        parser
    }

    #[test]
    fn cursor_position_is_one_based() {
        let parser = screen(b"\x1b[5;7Hx");
        assert_eq!(
            answer(b"\x1b[6n", parser.screen()).as_deref(),
            Some(&b"\x1b[5;8R"[..])
        );
        assert_eq!(
            answer(b"\x1b[6n", screen(b"").screen()).as_deref(),
            Some(&b"\x1b[1;1R"[..])
        );
    }

    #[test]
    fn common_queries_have_answers() {
        let parser = screen(b"");
        let s = parser.screen();
        assert_eq!(said(b"\x1b[5n", s), b"\x1b[0n");
        assert_eq!(said(b"\x1b[c", s), b"\x1b[?62;22c");
        assert_eq!(said(b"\x1b[0c", s), b"\x1b[?62;22c");
        assert_eq!(said(b"\x1b[>c", s), b"\x1b[>0;10;1c");
        assert_eq!(said(b"\x1b[18t", s), b"\x1b[8;24;80t");
        assert!(said(b"\x1b[>q", s).starts_with(b"\x1bP>|grove "));
    }

    #[test]
    fn colours_are_answered_with_the_query_terminator() {
        let parser = screen(b"");
        let s = parser.screen();
        assert_eq!(said(b"\x1b]11;?\x07", s), b"\x1b]11;rgb:0000/0000/0000\x07");
        assert_eq!(
            said(b"\x1b]10;?\x1b\\", s),
            b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"
        );
    }

    #[test]
    fn what_would_tell_the_viewer_is_not_answered() {
        let parser = screen(b"");
        let s = parser.screen();
        for query in [
            &b"\x1b]52;c;?\x07"[..],
            b"\x1b[21t",
            b"\x1bP$qm\x1b\\",
            b"\x1b[14t",
        ] {
            assert_eq!(answer(query, s), None, "{query:?}");
        }
    }
}

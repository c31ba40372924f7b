//! Shared printing: JSON, tables that fit the terminal, colour, ages.
//!
//! Colour is decided once, at start-up, from `--color` and `NO_COLOR`: `auto` colours
//! only when standard output is a terminal and `NO_COLOR` is unset or empty.

use anyhow::Result;
use comfy_table::{Attribute, Cell, Color, ColumnConstraint, ContentArrangement, Table};
use grove_agent_shim::now_ms;
use grove_proto::types::{AgentRecord, AgentStatus, Outcome};
use serde::Serialize;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::OnceLock;

/// When to colour the output (`--color`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// Colour when standard output is a terminal and NO_COLOR is unset.
    #[default]
    Auto,
    /// Colour, even on a pipe.
    Always,
    /// No colour.
    Never,
}

static COLOR: OnceLock<bool> = OnceLock::new();

/// Decides, once, whether this process colours its output.
pub fn init_color(when: ColorWhen) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let on = match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => !no_color && std::io::stdout().is_terminal(),
    };
    let _ = COLOR.set(on);
}

pub fn color() -> bool {
    COLOR.get().copied().unwrap_or(false)
}

/// What a piece of text says, as a colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Succeeded, ok: green.
    Good,
    /// Failed, killed, lost: red.
    Bad,
    /// Timed out, queued, a warning: yellow.
    Warn,
    /// Running, preparing: cyan.
    Busy,
    /// Cancelled, unimportant: grey.
    Dim,
}

impl Tone {
    fn table_color(self) -> Color {
        match self {
            Tone::Good => Color::Green,
            Tone::Bad => Color::Red,
            Tone::Warn => Color::Yellow,
            Tone::Busy => Color::Cyan,
            Tone::Dim => Color::DarkGrey,
        }
    }

    fn ansi(self) -> &'static str {
        match self {
            Tone::Good => "\x1b[32m",
            Tone::Bad => "\x1b[31m",
            Tone::Warn => "\x1b[33m",
            Tone::Busy => "\x1b[36m",
            Tone::Dim => "\x1b[90m",
        }
    }
}

/// `text` in the tone's colour when colour is on.
pub fn paint(text: &str, tone: Option<Tone>) -> String {
    match tone {
        Some(tone) if color() => format!("{}{text}\x1b[0m", tone.ansi()),
        _ => text.to_string(),
    }
}

/// A table cell in the tone's colour (the table decides whether to show colour).
pub fn cell(text: impl ToString, tone: Option<Tone>) -> Cell {
    let cell = Cell::new(text);
    match tone {
        Some(tone) => cell.fg(tone.table_color()),
        None => cell,
    }
}

pub fn status_tone(status: AgentStatus, outcome: Option<Outcome>) -> Option<Tone> {
    Some(match (status, outcome) {
        (AgentStatus::Queued | AgentStatus::Paused, _) => Tone::Warn,
        (AgentStatus::Preparing | AgentStatus::Running, _) => Tone::Busy,
        (_, Some(Outcome::Succeeded)) => Tone::Good,
        (_, Some(Outcome::Failed | Outcome::Killed)) => Tone::Bad,
        (_, Some(Outcome::TimedOut)) => Tone::Warn,
        (AgentStatus::Lost, _) => Tone::Bad,
        (AgentStatus::Exited, None) => Tone::Busy,
        (AgentStatus::Collected | AgentStatus::Cancelled, None) => Tone::Dim,
    })
}

/// The tone of a status as the daemon spells it in summaries (`running`, `failed`...).
pub fn status_word_tone(word: &str) -> Option<Tone> {
    let first = word.split([' ', '(']).next().unwrap_or(word);
    match first {
        "succeeded" => Some(Tone::Good),
        "failed" | "killed" | "lost" => Some(Tone::Bad),
        "timed" | "timed_out" | "queued" | "paused" => Some(Tone::Warn),
        "running" | "preparing" | "exited" => Some(Tone::Busy),
        "cancelled" => Some(Tone::Dim),
        _ => None,
    }
}

/// The agent's status as a coloured cell, with the question it waits on.
pub fn status_cell(record: &AgentRecord) -> Cell {
    cell(
        status_asking(record),
        status_tone(record.status, record.outcome),
    )
}

/// The status, and for an agent that asks (`grove ask`) its question, cut to fit a
/// table (`grove show` has all of it).
pub fn status_asking(record: &AgentRecord) -> String {
    const SHOWN: usize = 48;
    let Some(question) = &record.question else {
        return record.status_text();
    };
    let text = safe(&question.text.replace(['\n', '\r'], " "));
    let cut: String = text.chars().take(SHOWN).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{}: {cut}{more}", record.status_text())
}

/// The agent's status as coloured text.
pub fn status_text(record: &AgentRecord) -> String {
    paint(
        &record.status_text(),
        status_tone(record.status, record.outcome),
    )
}

/// Text an agent or a repository supplied (a report, a name, argv, a path, a branch, a
/// commit subject, git's or the daemon's error text), made safe to print on one line of
/// a terminal or a table cell: an escape sequence could retitle the window, overwrite
/// or hide what grove printed, and a newline would break a table row. Control
/// characters become visible escapes (`\e`, `\r`, `\n`, `\x07`, `\u{9b}`), tabs become
/// spaces, and so do the bidi overrides that reorder what the eye sees.
pub fn safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        escape_into(&mut out, c);
    }
    out
}

/// Like [`safe`] for text that is meant to span lines (a report, an error): newlines
/// stay, and each following line is indented by `indent` spaces so that it stays under
/// its label. A Windows line end counts as one newline.
pub fn safe_block(text: &str, indent: usize) -> String {
    let pad = format!("\n{}", " ".repeat(indent));
    text.split('\n')
        .map(|line| safe(line.strip_suffix('\r').unwrap_or(line)))
        .collect::<Vec<_>>()
        .join(&pad)
}

/// A path for people, through [`safe`].
pub fn safe_path(path: &std::path::Path) -> String {
    safe(&path.to_string_lossy())
}

/// A file name for people, through [`safe`].
pub fn safe_os(name: &std::ffi::OsStr) -> String {
    safe(&name.to_string_lossy())
}

fn escape_into(out: &mut String, c: char) {
    use std::fmt::Write;
    match c {
        '\t' => out.push(' '),
        '\x1b' => out.push_str("\\e"),
        '\r' => out.push_str("\\r"),
        '\n' => out.push_str("\\n"),
        c if (c as u32) < 0x20 || c == '\x7f' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        // C1 controls (a terminal may take U+009B as CSI), bidi embeddings, overrides
        // and isolates, and the Unicode line and paragraph separators.
        '\u{80}'..='\u{9f}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints `value` as JSON with `--json`, else for people with `print_human`: the end of
/// a command that shows what the daemon answered.
pub fn print_json_or<T: Serialize>(
    json: bool,
    value: &T,
    print_human: impl FnOnce(&T),
) -> Result<ExitCode> {
    if json {
        print_json(value)?;
    } else {
        print_human(value);
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes that end a token outside strings, or start a string.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 7 {
        table[b"\"{}[],:"[i] as usize] = true;
        i += 1;
    }
    table
};

/// A newline and the indentation of the deepest levels JSON output usually has.
const INDENT: &[u8] = b"\n                                ";

fn newline(out: &mut Vec<u8>, depth: usize) {
    match INDENT.get(..1 + 2 * depth) {
        Some(indent) => out.extend_from_slice(indent),
        None => {
            out.push(b'\n');
            out.resize(out.len() + 2 * depth, b' ');
        }
    }
}

/// Appends `compact` (JSON as serde_json writes it, without whitespace between tokens)
/// to `out` laid out exactly as `serde_json::to_string_pretty` lays it out, nested
/// `depth` levels deep. Re-indenting the text costs a fraction of parsing it into
/// types and serializing it again, which is what `grove --json list` did with every
/// record.
pub fn pretty_into(out: &mut Vec<u8>, compact: &[u8], mut depth: usize) {
    let mut i = 0;
    while i < compact.len() {
        let plain = compact[i..]
            .iter()
            .position(|&b| STRUCTURAL[b as usize])
            .unwrap_or(compact.len() - i);
        out.extend_from_slice(&compact[i..i + plain]);
        i += plain;
        let Some(&byte) = compact.get(i) else {
            break;
        };
        match byte {
            b'"' => {
                let mut end = i + 1;
                loop {
                    let next = compact
                        .get(end..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest));
                    match next {
                        Some(at) if compact[end + at] == b'\\' => end += at + 2,
                        Some(at) => {
                            end += at + 1;
                            break;
                        }
                        None => {
                            end = compact.len();
                            break;
                        }
                    }
                }
                out.extend_from_slice(&compact[i..end]);
                i = end;
                continue;
            }
            b'{' | b'[' => {
                let close = if byte == b'{' { b'}' } else { b']' };
                if compact.get(i + 1) == Some(&close) {
                    out.extend_from_slice(&[byte, close]);
                    i += 1;
                } else {
                    out.push(byte);
                    depth += 1;
                    newline(out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(out, depth);
                out.push(byte);
            }
            b',' => {
                out.push(b',');
                newline(out, depth);
            }
            _ => out.extend_from_slice(b": "),
        }
        i += 1;
    }
}

/// "42s", "3m", "5h", "2d": how long ago `ms` was.
pub fn age(ms: u64) -> String {
    duration(now_ms().saturating_sub(ms))
}

/// "just now", "42s ago", "3m ago".
pub fn ago(ms: u64) -> String {
    let elapsed = now_ms().saturating_sub(ms);
    if elapsed < 1000 {
        "just now".into()
    } else {
        format!("{} ago", duration(elapsed))
    }
}

pub fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// Two units where it helps: "42s", "3m05s", "2h10m", "3d4h".
pub fn duration_precise(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// "+12 -3".
pub fn changes(insertions: u64, deletions: u64) -> String {
    format!("+{insertions} -{deletions}")
}

/// "+12 -3" for an agent whose result is known, "-" before.
pub fn record_changes(record: &AgentRecord) -> String {
    match (record.insertions, record.deletions) {
        (Some(ins), Some(del)) => changes(ins, del),
        _ => "-".into(),
    }
}

/// "1 file +12 -3", "4 files +12 -3".
pub fn diffstat(record: &AgentRecord) -> String {
    match (record.files_changed, record.insertions, record.deletions) {
        (Some(1), Some(ins), Some(del)) => format!("1 file {}", changes(ins, del)),
        (Some(files), Some(ins), Some(del)) => format!("{files} files {}", changes(ins, del)),
        _ => "-".into(),
    }
}

/// "512 B", "3.2 KiB", "1.5 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Columns of standard output when it is a terminal.
pub fn terminal_width() -> Option<u16> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(width) = grove_sys::term::stdout_width() {
        return Some(width);
    }
    crossterm::terminal::size()
        .ok()
        .map(|(w, _)| w)
        .filter(|w| *w > 0)
}

/// The narrowest a wrapping column gets.
const MIN_WRAPPED_WIDTH: usize = 9;

/// Columns whose cells may wrap onto several lines when the terminal is narrow.
const WRAPPING_COLUMNS: &[&str] = &[
    "STATUS",
    "NAME",
    "REPO",
    "BRANCH",
    "BASE",
    "COMMAND",
    "REPORT",
    "LAST LINE",
    "PATH",
    "WHY",
    "WORK IS ON",
    "SUBJECT",
    "CHANNELS",
    "SESSION",
    "VALUE",
    "SOURCE",
    "FILE",
    "AGENTS",
    "LINES",
];

/// A borderless table that fits the terminal (long cells wrap) and is coloured when
/// colour is on; on a pipe, lines are as long as their content.
pub fn table<C: Into<Cell>>(header: &[&str], rows: Vec<Vec<C>>) -> String {
    table_with_width(header, rows, terminal_width())
}

pub fn table_with_width<C: Into<Cell>>(
    header: &[&str],
    rows: Vec<Vec<C>>,
    width: Option<u16>,
) -> String {
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .force_no_tty();
    if color() {
        table.enforce_styling().style_text_only();
    }
    if let Some(width) = width {
        table
            .set_width(width)
            .set_content_arrangement(ContentArrangement::Dynamic);
    }
    table.set_header(
        header
            .iter()
            .map(|h| Cell::new(h).add_attribute(Attribute::Bold)),
    );
    // The widest line of each column, header included.
    let mut widest: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        let cells: Vec<Cell> = row.into_iter().map(Into::into).map(escaped_cell).collect();
        for (i, cell) in cells.iter().enumerate() {
            let width = cell
                .content()
                .lines()
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(0);
            if let Some(w) = widest.get_mut(i) {
                *w = (*w).max(width);
            }
        }
        table.add_row(cells);
    }
    for ((column, name), widest) in table.column_iter_mut().zip(header).zip(widest) {
        column.set_padding((0, 2));
        // Short values (ids, ages, counts) never wrap; long ones give way, down to a
        // few characters, breaking at spaces where they can.
        let constraint = if WRAPPING_COLUMNS.contains(name) {
            let least = widest.min(MIN_WRAPPED_WIDTH) as u16 + 2;
            ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(least))
        } else {
            ColumnConstraint::ContentWidth
        };
        column.set_constraint(constraint);
    }
    table
        .lines()
        .map(|line| line.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cell, or when a printer let a control character through, a plain cell with it
/// escaped: a newline from a repository's name must not start a row of its own.
fn escaped_cell(cell: Cell) -> Cell {
    let content = cell.content();
    let shown = safe(&content);
    if shown == content {
        cell
    } else {
        Cell::new(shown)
    }
}

/// One line per finished agent, for `wait` and `spawn --wait`.
pub fn result_line(record: &AgentRecord) -> String {
    let branch = if record.branch_exists {
        record.branch.as_str()
    } else {
        "(no commits; branch removed)"
    };
    let line = format!(
        "{}  {}  {}  {}",
        safe(&record.id),
        status_text(record),
        safe(branch),
        diffstat(record)
    );
    match &record.report {
        Some(report) => format!("{line}\n    report: {}", safe_block(report, 12)),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_indenting_compact_json_matches_serde_pretty() {
        let values = [
            serde_json::json!({
                "a": [], "b": {}, "c": [1, -2.5, true, null, "x"],
                "quotes \"and\\ escapes\\": "tab\t \\\" {[,:]} \u{1f600} é",
                "nested": [{"d": [[], [{}], {"e": {"f": [1, [2, [3]]]}}]}],
                "deep": [[[[[[[[[[[[[[[[[[[[["bottom"]]]]]]]]]]]]]]]]]]]]],
                "": ""
            }),
            serde_json::json!([]),
            serde_json::json!("plain \\"),
            serde_json::json!(12),
        ];
        for value in values {
            let compact = serde_json::to_vec(&value).expect("compact");
            let mut out = Vec::new();
            pretty_into(&mut out, &compact, 0);
            let want = serde_json::to_string_pretty(&value).expect("pretty");
            assert_eq!(String::from_utf8(out).expect("utf-8"), want);
        }
        let mut nested = b"[".to_vec();
        newline(&mut nested, 1);
        pretty_into(&mut nested, br#"{"k":[1,2]}"#, 1);
        newline(&mut nested, 0);
        nested.push(b']');
        let want = serde_json::to_string_pretty(&serde_json::json!([{"k": [1, 2]}]));
        assert_eq!(String::from_utf8(nested).ok(), want.ok());
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(185_000), "3m");
        assert_eq!(duration_precise(185_000), "3m05s");
        assert_eq!(duration_precise(2 * 3_600_000 + 600_000), "2h10m");
        assert_eq!(ago(now_ms()), "just now");
        assert_eq!(ago(now_ms() - 180_500), "3m ago");
        assert_eq!(changes(12, 3), "+12 -3");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024 + 200), "3.2 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn tables_fit_the_width_they_are_given() {
        let rows = vec![vec![
            "abcd1234".to_string(),
            "a long command line that does not fit into forty columns at all".to_string(),
        ]];
        let text = table_with_width(&["ID", "COMMAND"], rows, Some(40));
        assert!(text.lines().count() > 2, "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 40, "{line:?}");
        }
        assert!(text.starts_with("ID"), "no leading padding: {text}");
        assert!(text.contains("abcd1234"), "ids never wrap: {text}");
        let rows = vec![vec!["succeeded", "grove/a-long-branch-name-abcdef12"]];
        let text = table_with_width(&["STATUS", "BRANCH"], rows, Some(24));
        assert!(text.contains("succeeded"), "statuses never wrap: {text}");
        let rows = vec![vec!["two\nlines\x1b[2K", "x"]];
        let text = table_with_width(&["NAME", "X"], rows, None);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains(r"two\nlines\e[2K"), "{text}");
    }

    #[test]
    fn control_characters_become_visible() {
        let attack =
            "\x1b]0;pwned\x07title\x1b[2K\rover\x1b[8mhidden\x1b[0m\tend\u{9b}31m\u{202e}txt";
        let shown = safe(attack);
        assert_eq!(
            shown,
            "\\e]0;pwned\\x07title\\e[2K\\rover\\e[8mhidden\\e[0m end\\u{9b}31m\\u{202e}txt"
        );
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(safe("two\nlines"), "two\\nlines");
        assert_eq!(safe("plain é ✓ \\ path/x"), "plain é ✓ \\ path/x");
        assert_eq!(
            safe_block("one\r\ntwo\x1b[2K\nthree", 4),
            "one\n    two\\e[2K\n    three"
        );
    }

    #[test]
    fn statuses_have_tones() {
        use AgentStatus::*;
        assert_eq!(status_tone(Running, None), Some(Tone::Busy));
        assert_eq!(
            status_tone(Collected, Some(Outcome::Succeeded)),
            Some(Tone::Good)
        );
        assert_eq!(
            status_tone(Collected, Some(Outcome::Killed)),
            Some(Tone::Bad)
        );
        assert_eq!(
            status_tone(Collected, Some(Outcome::TimedOut)),
            Some(Tone::Warn)
        );
        assert_eq!(status_tone(Queued, None), Some(Tone::Warn));
        assert_eq!(status_tone(Lost, None), Some(Tone::Bad));
        assert_eq!(status_word_tone("failed (exit 3)"), Some(Tone::Bad));
        assert_eq!(status_word_tone("timed out"), Some(Tone::Warn));
    }
}

//! `grove top`: the live agents with CPU, memory, runtime and their last line: a
//! terminal agent's from its screen (a TUI's log is cursor movement and title escapes,
//! whose last line reads as nothing), any other's from its log.
//!
//! CPU and memory are summed over the agent's whole process tree: the shim (the pid in
//! the record) and every descendant, from the platform seam (/proc on Linux: `stat`
//! utime+stime, `statm` rss).
//! On a terminal it redraws once a second until `q`, and acts on the selected agent:
//! `a` attach, `l` follow its log, `s` preview its screen, `d` its diff (see
//! [`preview`]), `k` kill (after a `y`), `p` pause or resume, `?` help. Agents that
//! finish stay on the list, dimmed, for a while. Elsewhere, or with
//! `--once` or `--json`, it prints one snapshot.

mod preview;

use crate::connect::{connect, dirs};
use crate::output::{
    bytes, cell, duration_precise, print_json, safe, status_tone, table_with_width, terminal_width,
};
use anyhow::{Context, Result};
use comfy_table::Cell;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use grove_agent_shim::now_ms;
use grove_proto::methods::{Screen as ScreenCall, ScreenParams};
use grove_proto::types::{AgentRecord, AgentStatus, Outcome};
use grove_proto::Client;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long a one-off snapshot measures CPU use.
const SNAPSHOT_WINDOW: Duration = Duration::from_millis(250);
const REFRESH: Duration = Duration::from_secs(1);

#[derive(Debug, Serialize)]
struct Snapshot {
    at_ms: u64,
    agents: Vec<AgentUsage>,
}

#[derive(Debug, Serialize)]
struct AgentUsage {
    id: String,
    name: Option<String>,
    status: AgentStatus,
    outcome: Option<Outcome>,
    status_text: String,
    /// The shim's pid: the root of the agent's process tree.
    pid: Option<u32>,
    /// Processes in the tree (the shim included); 0 when it is not running.
    processes: usize,
    /// CPU use over the last interval, in percent of one core.
    cpu_percent: Option<f64>,
    /// CPU time used so far by the processes alive now.
    cpu_seconds: f64,
    /// Resident memory of the tree.
    memory_bytes: u64,
    runtime_ms: Option<u64>,
    last_log_line: Option<String>,
    /// A terminal agent's: the last line of its screen that holds a letter or digit.
    #[serde(skip_serializing_if = "Option::is_none")]
    screen_line: Option<String>,
    log_path: std::path::PathBuf,
    /// Finished since `top` started: shown dimmed for a while.
    #[serde(skip)]
    lingering: bool,
}

pub fn run(once: bool, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    let interactive = !once && !json && std::io::stdout().is_terminal();
    if interactive {
        return live(&mut client);
    }
    let first = ProcTable::read();
    let started = Instant::now();
    std::thread::sleep(SNAPSHOT_WINDOW);
    let snapshot = snapshot(&mut client, &first, started.elapsed())?;
    if json {
        print_json(&snapshot)?;
    } else {
        println!("{}", render(&snapshot, terminal_width()));
    }
    Ok(ExitCode::SUCCESS)
}

fn snapshot(client: &mut Client, before: &ProcTable, window: Duration) -> Result<Snapshot> {
    let agents = crate::connect::list_agents(client, false)?;
    let now = ProcTable::read();
    let at_ms = now_ms();
    Ok(Snapshot {
        at_ms,
        agents: agents
            .iter()
            .map(|a| {
                let mut row = usage(a, before, &now, window, at_ms);
                row.screen_line = screen_line(client, a);
                row
            })
            .collect(),
    })
}

fn usage(
    a: &AgentRecord,
    before: &ProcTable,
    now: &ProcTable,
    window: Duration,
    at_ms: u64,
) -> AgentUsage {
    let running = a.status.is_running();
    let tree = match (running, a.pid) {
        (true, Some(pid)) => now.tree(pid),
        _ => Vec::new(),
    };
    let ticks_now: u64 = tree
        .iter()
        .filter_map(|p| now.procs.get(p))
        .map(|p| p.cpu_ticks)
        .sum();
    // A process born during the interval used all of its CPU time within it.
    let ticks_delta: u64 = tree
        .iter()
        .filter_map(|p| {
            let was = before.procs.get(p).map_or(0, |b| b.cpu_ticks);
            Some(now.procs.get(p)?.cpu_ticks.saturating_sub(was))
        })
        .sum();
    let tck = grove_sys::proc::clock_ticks_per_second() as f64;
    let secs = window.as_secs_f64();
    AgentUsage {
        id: a.id.clone(),
        name: a.name.clone(),
        status: a.status,
        outcome: a.outcome,
        status_text: crate::output::status_asking(a),
        pid: a.pid,
        processes: tree.len(),
        cpu_percent: (!tree.is_empty() && secs > 0.0)
            .then(|| (ticks_delta as f64 / tck / secs * 1000.0).round() / 10.0),
        cpu_seconds: (ticks_now as f64 / tck * 100.0).round() / 100.0,
        memory_bytes: tree.iter().map(|p| rss_bytes(*p)).sum(),
        runtime_ms: a
            .started_at_ms
            .map(|start| a.ended_at_ms.unwrap_or(at_ms).saturating_sub(start)),
        last_log_line: last_line(&a.log_path),
        screen_line: None,
        log_path: a.log_path.clone(),
        lingering: false,
    }
}

fn render(snapshot: &Snapshot, width: Option<u16>) -> String {
    render_selected(snapshot, width, None)
}

fn render_selected(snapshot: &Snapshot, width: Option<u16>, selected: Option<usize>) -> String {
    if snapshot.agents.is_empty() {
        return "no live agents".into();
    }
    let rows = snapshot
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let running = a.processes > 0;
            let row = vec![
                Cell::new(safe(&a.id)),
                Cell::new(safe(a.name.as_deref().unwrap_or("-"))),
                cell(&a.status_text, status_tone(a.status, a.outcome)),
                Cell::new(if running {
                    a.processes.to_string()
                } else {
                    "-".into()
                }),
                Cell::new(match a.cpu_percent {
                    Some(p) => format!("{p:.1}%"),
                    None => "-".into(),
                }),
                Cell::new(if running {
                    bytes(a.memory_bytes)
                } else {
                    "-".into()
                }),
                Cell::new(
                    a.runtime_ms
                        .map(duration_precise)
                        .unwrap_or_else(|| "-".into()),
                ),
                Cell::new(
                    a.screen_line
                        .as_deref()
                        .or(a.last_log_line.as_deref())
                        .unwrap_or(""),
                ),
            ];
            let row = if a.lingering {
                row.into_iter()
                    .map(|c| c.add_attribute(comfy_table::Attribute::Dim))
                    .collect()
            } else {
                row
            };
            if selected == Some(i) {
                row.into_iter()
                    .map(|c| c.add_attribute(comfy_table::Attribute::Reverse))
                    .collect()
            } else {
                row
            }
        })
        .collect();
    table_with_width(
        &[
            "ID",
            "NAME",
            "STATUS",
            "PROCS",
            "CPU",
            "MEM",
            "RUNTIME",
            "LAST LINE",
        ],
        rows,
        width,
    )
}

/// The terminal state `live` changes, put back however it ends.
struct RawTerminal;

impl RawTerminal {
    fn enter() -> Result<RawTerminal> {
        terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        let guard = RawTerminal;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(guard)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// How long a finished agent stays on the live screen (dimmed).
const LINGER: Duration = Duration::from_secs(30);

const HELP: &str = "keys: up/down (or j) select   a attach   l follow the log (Ctrl-C returns)   \
s screen   d diff (Esc back)   k kill   p pause/resume   ? this help   q quit";

/// What the live screen remembers between refreshes.
#[derive(Default)]
struct Screen {
    selected: Option<String>,
    /// Agents that left the live list: their last record and when they left.
    finished: HashMap<String, (AgentRecord, Instant)>,
    shown: Vec<String>,
    message: Option<String>,
    help: bool,
    confirm_kill: Option<String>,
    /// The selected agent's screen or diff, shown instead of the table.
    preview: Option<preview::Preview>,
}

fn live(client: &mut Client) -> Result<ExitCode> {
    let mut terminal = Some(RawTerminal::enter()?);
    let mut before = ProcTable::read();
    let mut sampled = Instant::now();
    let mut screen = Screen::default();
    std::thread::sleep(SNAPSHOT_WINDOW);
    loop {
        let mut snapshot = snapshot(client, &before, sampled.elapsed())?;
        linger(
            client,
            &mut screen,
            &mut snapshot,
            &before,
            sampled.elapsed(),
        );
        before = ProcTable::read();
        sampled = Instant::now();
        if let Some(preview) = &mut screen.preview {
            preview.reload(client);
        }
        draw(&snapshot, &mut screen)?;
        let deadline = Instant::now() + REFRESH;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            match event::read()? {
                Event::Key(key) if key.kind != KeyEventKind::Release => {
                    let ctrl_c = key.code == KeyCode::Char('c')
                        && key.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c {
                        return Ok(ExitCode::SUCCESS);
                    }
                    if let Some(preview) = &mut screen.preview {
                        let page = terminal::size().map_or(22, |(_, h)| h.saturating_sub(2));
                        if let preview::Outcome::Close = preview.key(client, key.code, page.into())
                        {
                            screen.preview = None;
                        }
                        draw(&snapshot, &mut screen)?;
                        continue;
                    }
                    if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(ExitCode::SUCCESS);
                    }
                    if act(client, &mut screen, &mut terminal, key.code)? {
                        break;
                    }
                    draw(&snapshot, &mut screen)?;
                }
                Event::Resize(..) => draw(&snapshot, &mut screen)?,
                _ => {}
            }
        }
    }
}

/// Keeps agents that finished since the last refresh on the screen for [`LINGER`].
fn linger(
    client: &mut Client,
    screen: &mut Screen,
    snapshot: &mut Snapshot,
    before: &ProcTable,
    window: Duration,
) {
    let live: Vec<String> = snapshot.agents.iter().map(|a| a.id.clone()).collect();
    let gone: Vec<String> = screen
        .shown
        .iter()
        .filter(|id| !live.contains(id) && !screen.finished.contains_key(*id))
        .cloned()
        .collect();
    for id in gone {
        let params = grove_proto::methods::IdParams { id: id.clone() };
        if let Ok(record) = client.call::<grove_proto::methods::Get>(&params) {
            screen.finished.insert(id, (record, Instant::now()));
        }
    }
    screen.finished.retain(|_, (_, at)| at.elapsed() < LINGER);
    let now = ProcTable::read();
    let at_ms = now_ms();
    let mut finished: Vec<&(AgentRecord, Instant)> = screen.finished.values().collect();
    finished.sort_by_key(|(r, _)| r.created_at_ms);
    for (record, _) in finished {
        if live.contains(&record.id) {
            continue;
        }
        let mut row = usage(record, before, &now, window, at_ms);
        row.screen_line = screen_line(client, record);
        row.lingering = true;
        snapshot.agents.push(row);
    }
    screen.shown = snapshot
        .agents
        .iter()
        .filter(|a| !a.lingering)
        .map(|a| a.id.clone())
        .collect();
}

/// Acts on a key; true when the list should be read again at once.
fn act(
    client: &mut Client,
    screen: &mut Screen,
    terminal: &mut Option<RawTerminal>,
    key: KeyCode,
) -> Result<bool> {
    let selected = screen.selected.clone();
    if let Some(victim) = screen.confirm_kill.take() {
        screen.message = Some(if key == KeyCode::Char('y') {
            let params = grove_proto::methods::IdParams { id: victim.clone() };
            match client.call::<grove_proto::methods::Kill>(&params) {
                Ok(_) => format!("{victim}: stopping"),
                Err(e) => format!("{victim}: {e}"),
            }
        } else {
            format!("{victim}: not killed")
        });
        return Ok(true);
    }
    screen.message = None;
    match (key, selected) {
        (KeyCode::Up, _) => {
            screen.selected = step(&screen.shown_all(), screen.selected.as_deref(), -1)
        }
        (KeyCode::Down | KeyCode::Char('j'), _) => {
            screen.selected = step(&screen.shown_all(), screen.selected.as_deref(), 1)
        }
        (KeyCode::Char('?'), _) => screen.help = !screen.help,
        (KeyCode::Char('k'), Some(id)) => {
            screen.message = Some(format!("kill agent {id} and everything it started? y/N"));
            screen.confirm_kill = Some(id);
        }
        (KeyCode::Char('a'), Some(id)) => {
            outside(terminal, &["attach", &id])?;
            return Ok(true);
        }
        (KeyCode::Char('l'), Some(id)) => {
            outside(terminal, &["logs", "--follow", &id])?;
            return Ok(true);
        }
        (KeyCode::Char('p'), Some(id)) => {
            screen.message = Some(pause_or_resume(client, &id));
            return Ok(true);
        }
        (KeyCode::Char('s'), Some(id)) => {
            screen.preview = Some(preview::Preview::open(client, id, preview::Kind::Screen))
        }
        (KeyCode::Char('d'), Some(id)) => {
            screen.preview = Some(preview::Preview::open(client, id, preview::Kind::Diff))
        }
        (KeyCode::Char('a' | 'l' | 'k' | 'p' | 's' | 'd'), None) => {
            screen.message = Some("select an agent first (up/down)".into())
        }
        _ => {}
    }
    Ok(false)
}

impl Screen {
    fn shown_all(&self) -> Vec<String> {
        let mut all = self.shown.clone();
        let mut finished: Vec<&(AgentRecord, Instant)> = self.finished.values().collect();
        finished.sort_by_key(|(r, _)| r.created_at_ms);
        all.extend(
            finished
                .into_iter()
                .map(|(r, _)| r.id.clone())
                .filter(|id| !self.shown.contains(id)),
        );
        all
    }
}

fn step(ids: &[String], current: Option<&str>, by: isize) -> Option<String> {
    if ids.is_empty() {
        return None;
    }
    let at = current.and_then(|c| ids.iter().position(|id| id == c));
    let next = match at {
        None => 0,
        Some(i) => (i as isize + by).clamp(0, ids.len() as isize - 1) as usize,
    };
    ids.get(next).cloned()
}

fn pause_or_resume(client: &mut Client, id: &str) -> String {
    let paused = client
        .call::<grove_proto::methods::Get>(&grove_proto::methods::IdParams { id: id.into() })
        .map(|r| r.status_text() == "paused")
        .unwrap_or(false);
    let method = if paused {
        "agent.resume"
    } else {
        "agent.pause"
    };
    match client.call_raw(method, serde_json::json!({ "id": id })) {
        Ok(response) => match response.error {
            None if paused => format!("{id}: resumed"),
            None => format!("{id}: paused"),
            Some(e) => format!("{id}: {}", e.message),
        },
        Err(e) => format!("{id}: {e}"),
    }
}

/// Runs `grove <args>` on the plain terminal, then takes the screen back. The command
/// runs in a process group of its own in the terminal's foreground, as a shell runs a
/// job: Ctrl-C ends it (`logs --follow`), not `top`.
fn outside(terminal: &mut Option<RawTerminal>, args: &[&str]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    *terminal = None;
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(args)
        .process_group(0)
        .spawn();
    match child {
        Ok(mut child) => {
            let handed = grove_sys::term::give_foreground(child.id());
            let _ = child.wait();
            grove_sys::term::take_foreground()?;
            handed?;
        }
        Err(e) => eprintln!("grove top: cannot run grove {}: {e}", args.join(" ")),
    }
    *terminal = Some(RawTerminal::enter()?);
    Ok(())
}

fn draw(snapshot: &Snapshot, screen: &mut Screen) -> Result<()> {
    let (width, height) = terminal::size().unwrap_or((80, 24));
    if let Some(preview) = &screen.preview {
        return paint(&preview.render(width.into(), height.into()));
    }
    let running = snapshot
        .agents
        .iter()
        .filter(|a| a.status.is_running())
        .count();
    let ids: Vec<&str> = snapshot.agents.iter().map(|a| a.id.as_str()).collect();
    if screen
        .selected
        .as_deref()
        .is_some_and(|s| !ids.contains(&s))
    {
        screen.selected = None;
    }
    let selected = screen
        .selected
        .as_deref()
        .and_then(|s| ids.iter().position(|id| *id == s));
    let live = snapshot.agents.iter().filter(|a| !a.lingering).count();
    let mut lines = vec![format!(
        "grove top: {running} running, {live} live    (? keys, q quits)"
    )];
    lines.push(String::new());
    lines.extend(
        render_selected(snapshot, Some(width), selected)
            .lines()
            .map(str::to_string),
    );
    if screen.help {
        lines.push(String::new());
        lines.push(HELP.into());
    }
    if let Some(message) = &screen.message {
        lines.push(String::new());
        lines.push(safe(message));
    }
    lines.truncate(height.max(1) as usize);
    paint(&lines)
}

fn paint(lines: &[String]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    queue!(
        out,
        cursor::MoveTo(0, 0),
        terminal::Clear(terminal::ClearType::All)
    )?;
    out.write_all(lines.join("\r\n").as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Every process: its parent and CPU time.
#[derive(Debug, Default)]
struct ProcTable {
    procs: HashMap<u32, grove_sys::proc::Stat>,
}

impl ProcTable {
    fn read() -> ProcTable {
        ProcTable {
            procs: grove_sys::proc::table(),
        }
    }

    /// `root` and all its descendants that are alive.
    fn tree(&self, root: u32) -> Vec<u32> {
        if !self.procs.contains_key(&root) {
            return Vec::new();
        }
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (pid, proc) in &self.procs {
            children.entry(proc.parent).or_default().push(*pid);
        }
        let mut found = vec![root];
        let mut next = 0;
        while next < found.len() {
            if let Some(kids) = children.get(&found[next]) {
                found.extend(kids.iter().copied().filter(|k| *k != root));
            }
            next += 1;
        }
        found
    }
}

fn rss_bytes(pid: u32) -> u64 {
    grove_sys::proc::rss_bytes(pid).unwrap_or(0)
}

/// A terminal agent's last line of its screen (the shim's terminal model, or the
/// screen it kept as it ended) that holds a letter or digit: a TUI's last rows are
/// often a border. `None` without a terminal, or when the screen cannot be had.
fn screen_line(client: &mut Client, a: &AgentRecord) -> Option<String> {
    a.tty.as_ref()?;
    let params = ScreenParams {
        id: a.id.clone(),
        ansi: false,
    };
    let screen = client.call::<ScreenCall>(&params).ok()?;
    last_text_line(&screen.text)
}

fn last_text_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(|l| safe(l.trim()))
        .find(|l| l.chars().any(char::is_alphanumeric))
}

/// The last non-empty line of the log, colour sequences dropped and every other
/// control character escaped (the agent's output must not move our cursor).
fn last_line(path: &Path) -> Option<String> {
    const TAIL: u64 = 8192;
    // Both halves: a half just begun may hold no whole line yet.
    let mut view = grove_proto::agent_log::LogView::open(path).ok()?;
    let (_, buf) = view.read(view.end().saturating_sub(TAIL), TAIL).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let line = text
        .split(['\n', '\r'])
        .rev()
        .map(clean)
        .find(|l| !l.is_empty())?;
    Some(line)
}

fn clean(line: &str) -> String {
    let mut plain = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            // CSI: ESC [ ... final byte in @..~
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    safe(plain.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_tree_holds_us() {
        let table = ProcTable::read();
        let me = std::process::id();
        assert!(table.tree(me).contains(&me));
        let parent = table.procs.get(&me).expect("we are in /proc").parent;
        assert!(table.tree(parent).contains(&me));
        assert!(table.tree(u32::MAX).is_empty());
        assert!(rss_bytes(me) > 0);
    }

    #[test]
    fn a_screens_last_line_is_its_last_with_words() {
        let screen = "\u{256d}\u{2500}\u{256e}\n\u{2502} \u{25cf} 1. Trust folder  \u{2502}\n\u{2570}\u{2500}\u{256f}\n\n";
        assert_eq!(
            last_text_line(screen).as_deref(),
            Some("\u{2502} \u{25cf} 1. Trust folder  \u{2502}")
        );
        assert_eq!(last_text_line("\n  \n"), None);
    }

    #[test]
    fn log_lines_are_cleaned() {
        assert_eq!(clean("\x1b[31mred\x1b[0m text\t!"), "red text !");
        assert_eq!(
            clean("\x1b]0;title\x07 x\u{9b}2J"),
            "\\e]0;title\\x07 x\\u{9b}2J"
        );
        let dir = std::env::temp_dir().join(format!("grove-top-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("out.log");
        std::fs::write(&log, "first\nsecond line\n\n").expect("write");
        assert_eq!(last_line(&log).as_deref(), Some("second line"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

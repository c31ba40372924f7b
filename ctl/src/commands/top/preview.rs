//! `grove top`'s preview: the selected agent's screen (`s`) or diff (`d`) on a page of
//! its own, read again at every refresh, scrolled with the arrows, Esc or q back to the
//! table.

use crate::output::safe;
use crossterm::event::KeyCode;
use grove_proto::methods::{Diff, DiffParams, Get, IdParams, Screen, ScreenParams};
use grove_proto::Client;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The terminal as it looks now: the shim's model, or the screen kept as it ended.
    Screen,
    /// A live agent's worktree against its base; a finished one's branch.
    Diff,
}

pub struct Preview {
    pub id: String,
    pub kind: Kind,
    lines: Vec<String>,
    /// The first line shown.
    top: usize,
}

/// What a key did to the preview.
pub enum Outcome {
    Stay,
    Close,
}

impl Preview {
    pub fn open(client: &mut Client, id: String, kind: Kind) -> Preview {
        let mut preview = Preview {
            id,
            kind,
            lines: Vec::new(),
            top: 0,
        };
        preview.reload(client);
        preview
    }

    /// Reads the screen or diff again, keeping the scroll where the text allows.
    pub fn reload(&mut self, client: &mut Client) {
        let text = match self.kind {
            Kind::Screen => screen(client, &self.id),
            Kind::Diff => diff(client, &self.id),
        }
        .unwrap_or_else(|e| format!("{e:#}"));
        self.lines = text.lines().map(safe).collect();
        self.top = self.top.min(self.lines.len().saturating_sub(1));
    }

    pub fn key(&mut self, client: &mut Client, key: KeyCode, page: usize) -> Outcome {
        let last = self.lines.len().saturating_sub(1);
        match key {
            KeyCode::Esc | KeyCode::Char('q') => return Outcome::Close,
            KeyCode::Up | KeyCode::Char('k') => self.top = self.top.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.top = (self.top + 1).min(last),
            KeyCode::PageUp | KeyCode::Char('b') => self.top = self.top.saturating_sub(page),
            KeyCode::PageDown | KeyCode::Char(' ') => self.top = (self.top + page).min(last),
            KeyCode::Home | KeyCode::Char('g') => self.top = 0,
            KeyCode::End | KeyCode::Char('G') => self.top = last.saturating_sub(page),
            KeyCode::Char('s') => self.switch(client, Kind::Screen),
            KeyCode::Char('d') => self.switch(client, Kind::Diff),
            _ => {}
        }
        Outcome::Stay
    }

    fn switch(&mut self, client: &mut Client, kind: Kind) {
        if self.kind != kind {
            self.kind = kind;
            self.top = 0;
            self.reload(client);
        }
    }

    /// The page: a title, then as many lines as fit from the scroll position on.
    pub fn render(&self, width: usize, height: usize) -> Vec<String> {
        let what = match self.kind {
            Kind::Screen => "screen",
            Kind::Diff => "diff",
        };
        let shown = self.lines.len().min(self.top + height.saturating_sub(2));
        let mut page = vec![
            clip(
                &format!(
                    "grove top: {what} of {}   lines {}-{} of {}   (up/down/PgUp/PgDn scroll, s screen, d diff, Esc back)",
                    safe(&self.id),
                    (self.top + 1).min(self.lines.len()),
                    shown,
                    self.lines.len()
                ),
                width,
            ),
            String::new(),
        ];
        if self.lines.is_empty() {
            page.push(format!("(the {what} is empty)"));
        }
        page.extend(
            self.lines[self.top.min(self.lines.len())..shown]
                .iter()
                .map(|l| clip(l, width)),
        );
        page.truncate(height.max(1));
        page
    }
}

fn clip(line: &str, width: usize) -> String {
    line.chars().take(width).collect()
}

fn screen(client: &mut Client, id: &str) -> anyhow::Result<String> {
    let params = ScreenParams {
        id: id.into(),
        ansi: false,
    };
    Ok(client.call::<Screen>(&params)?.text)
}

/// As `grove diff` shows it, without colour or pager.
fn diff(client: &mut Client, id: &str) -> anyhow::Result<String> {
    let record = client.call::<Get>(&IdParams { id: id.into() })?;
    if !record.status.is_final() {
        let params = DiffParams {
            id: id.into(),
            stat: false,
            paths: Vec::new(),
        };
        return Ok(client.call::<Diff>(&params)?.diff);
    }
    crate::commands::diff::finished(record)
}

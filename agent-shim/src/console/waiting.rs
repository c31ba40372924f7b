//! Telling "waiting for input" from "working": the output has been quiet for
//! `waiting_after` and the terminal's foreground process sleeps reading the terminal
//! (or in an event loop that has it as stdin). Checked once when the output goes quiet,
//! then every second while the agent works silently; never while it already waits.

use std::time::{Duration, Instant};

const RECHECK: Duration = Duration::from_secs(1);

pub struct Waiting {
    after: Duration,
    waiting: bool,
    check_at: Option<Instant>,
}

impl Waiting {
    pub fn new(after: Duration) -> Waiting {
        Waiting {
            after,
            waiting: false,
            check_at: Some(Instant::now() + after),
        }
    }

    pub fn never() -> Waiting {
        Waiting {
            after: Duration::MAX,
            waiting: false,
            check_at: None,
        }
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    pub fn next_check(&self) -> Option<Instant> {
        self.check_at
    }

    pub fn due(&self, now: Instant) -> bool {
        self.check_at.is_some_and(|at| now >= at)
    }

    /// Output came: true when that ends a wait.
    pub fn output(&mut self, now: Instant) -> bool {
        self.check_at = now.checked_add(self.after);
        std::mem::take(&mut self.waiting)
    }

    /// Input was typed: the same as output.
    pub fn input(&mut self, now: Instant) -> bool {
        self.output(now)
    }

    /// The result of a check: true when the agent has just started waiting.
    pub fn checked(&mut self, now: Instant, waiting: bool) -> bool {
        if waiting {
            self.check_at = None;
            !std::mem::replace(&mut self.waiting, true)
        } else {
            self.check_at = Some(now + RECHECK);
            false
        }
    }
}

/// True when a process of the foreground `group` sleeps waiting on the terminal.
pub fn group_reads_terminal(group: u32, device: u64) -> bool {
    if grove_sys::proc::waiting_on_terminal(group, device) {
        return true;
    }
    grove_sys::proc::table()
        .into_iter()
        .filter(|(pid, stat)| *pid != group && stat.process_group == group && stat.sleeping)
        .any(|(pid, _)| grove_sys::proc::waiting_on_terminal(pid, device))
}

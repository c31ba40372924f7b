//! A spinner on standard error while a command waits on the daemon: only on a terminal,
//! never with `--json`, and only once the wait has lasted a moment.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a wait lasts before the spinner shows up.
pub const SHOW_AFTER: Duration = Duration::from_millis(300);

/// True when a spinner may be drawn: standard error is a terminal and output is for people.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A spinner that appears after a delay and vanishes when dropped.
pub struct Spinner {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Nothing at all.
    pub fn none() -> Spinner {
        Spinner {
            stop: None,
            thread: None,
        }
    }

    /// Shows "⠋ {message} 3s" after `delay`, the clock starting at `already` elapsed.
    pub fn start(enabled: bool, message: String, delay: Duration, already: Duration) -> Spinner {
        if !enabled {
            return Spinner::none();
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if stopped.recv_timeout(delay) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
                .with_elapsed(already + delay)
                .with_message(message);
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            let _ = stopped.recv();
            bar.finish_and_clear();
        });
        Spinner {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

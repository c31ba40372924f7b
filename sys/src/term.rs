//! The terminal, through rustix (portable across Unix).

/// Columns of the terminal on stdout; `None` when stdout is not a terminal.
pub fn stdout_width() -> Option<u16> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (size.ws_col > 0).then_some(size.ws_col)
}

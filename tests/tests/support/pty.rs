//! A viewer's terminal for `grove attach`: a real pty whose raw bytes a test reads.

use super::Grove;
use std::fs::File;
use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

/// `grove attach ID` on a new pty of `rows` x `cols`; its master side, never blocking.
pub fn attach_on_pty(g: &Grove, id: &str, rows: u16, cols: u16) -> (File, Child) {
    let pty = nix::pty::openpty(
        Some(&nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }),
        None,
    )
    .expect("pty");
    let viewer_side = File::from(pty.slave);
    let attach = g
        .command()
        .args(["attach", id])
        .stdin(viewer_side.try_clone().expect("clone"))
        .stdout(viewer_side.try_clone().expect("clone"))
        .stderr(viewer_side)
        .spawn()
        .expect("attach");
    // Never blocked in a read past the deadline.
    nix::fcntl::fcntl(
        &pty.master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .expect("non-blocking");
    (File::from(pty.master), attach)
}

/// Reads the pty into `seen` until `text` is there, for `wait` at most.
pub fn read_pty_until(master: &mut File, seen: &mut Vec<u8>, text: &str, wait: Duration) {
    let deadline = Instant::now() + wait;
    while !String::from_utf8_lossy(seen).contains(text) {
        assert!(
            Instant::now() < deadline,
            "never saw {text:?}: {:?}",
            String::from_utf8_lossy(seen)
        );
        let mut buf = [0u8; 4096];
        match master.read(&mut buf) {
            Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

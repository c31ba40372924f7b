//! The daemon's instance lock as clients read it: whether a daemon holds it (and its
//! pid), and waiting for it to go, which is how a client learns a daemon has exited.

use anyhow::{anyhow, Result};
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::sync::mpsc;
use std::time::Duration;

/// The pid of the daemon holding the instance lock, if one does (the lock file holds
/// the pid of whoever locked it).
pub fn lock_holder(lock_path: &std::path::Path) -> Option<u32> {
    let file = File::open(lock_path).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // Nobody holds it: no daemon (ours is released when dropped).
        Ok(_) => None,
        Err(_) => std::fs::read_to_string(lock_path).ok()?.trim().parse().ok(),
    }
}

/// The daemon holds its lock until it exits: taking the lock is how we learn it is gone.
pub fn wait_until_gone(lock_path: &std::path::Path, limit: Duration) -> Result<()> {
    let file = File::open(lock_path)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Flock::lock(file, FlockArg::LockShared).is_ok());
    });
    match rx.recv_timeout(limit) {
        Ok(_) => Ok(()),
        Err(_) => Err(anyhow!(
            "the daemon did not exit within {}s; see {}",
            limit.as_secs(),
            lock_path.with_file_name("daemon.log").display()
        )),
    }
}

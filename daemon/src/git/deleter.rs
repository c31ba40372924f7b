//! Where removed worktrees' files are deleted: one thread of the lowest CPU and I/O
//! priority, fed in order. A checkout of a big repository is thousands of files (4,847
//! on git/git); deleted in the repository's lane, each one held up the collects and the
//! preparations queued behind it, for minutes on a loaded machine. Nothing waits for
//! this thread: a removal someone asked for (`rm`, prune, disk pressure), answered
//! once its space is free, deletes its own files on a blocking task instead.
//!
//! What the thread has not deleted when the daemon exits stays set aside
//! (`.grove-trash-*`, already salvaged and unregistered) and the next start hands it
//! here again.

use super::worktree::Trash;
use std::sync::mpsc;

#[derive(Clone)]
pub struct Deleter {
    jobs: mpsc::Sender<Trash>,
}

impl Deleter {
    /// Starts the thread; it ends when the last handle is dropped.
    pub fn start() -> std::io::Result<Deleter> {
        let (jobs, queue) = mpsc::channel::<Trash>();
        std::thread::Builder::new()
            .name("grove-deleter".into())
            .spawn(move || {
                grove_sys::priority::lower_this_thread();
                for trash in queue {
                    crate::faults::hold_thread("deleting");
                    trash.delete();
                }
            })?;
        Ok(Deleter { jobs })
    }

    /// Deletes `trash` when the thread gets to it.
    pub fn delete(&self, trash: Trash) {
        if let Err(mpsc::SendError(trash)) = self.jobs.send(trash) {
            // The thread is gone (the daemon is exiting): the next start deletes it.
            tracing::debug!(trash = ?trash, "left for the next start to delete");
        }
    }
}

//! Waiting for changes in a directory without polling (inotify).

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::io;
use std::path::Path;

/// Wakes when a file in the watched directory is created, written or renamed into it.
pub struct DirWatch(Inotify);

impl DirWatch {
    /// Watches `dir`; start watching before looking, so nothing in between is missed.
    pub fn new(dir: &Path) -> io::Result<DirWatch> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CREATE,
        )?;
        Ok(DirWatch(inotify))
    }

    /// Blocks until something changed.
    pub fn wait(&self) -> io::Result<()> {
        self.0.read_events()?;
        Ok(())
    }
}

//! Whether the database and its log can be trusted, said in words a user can act on:
//! what is damaged, what may be lost, what to do. Checked before the daemon opens the
//! database, by `grove doctor` and by `grove daemon recover`.

use super::mark::{self, Mark};
use super::wal::{self, Scan};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What to do about any damage: the one command that deals with it.
pub const RECOVER_ADVICE: &str = "run `grove daemon recover`: it keeps a copy of the \
     damaged files beside them, brings back what is readable and starts the daemon again";

/// The log SQLite keeps beside `db`.
pub fn wal_path(db: &Path) -> PathBuf {
    sibling(db, "-wal")
}

/// `db` with `suffix` appended to its file name.
pub fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(db.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// The log of `db` as SQLite will read it, and the daemon's mark of it.
#[derive(Debug, Clone)]
pub struct LogCheck {
    pub path: PathBuf,
    pub scan: Scan,
    pub mark: Option<Mark>,
}

impl LogCheck {
    /// What is damaged and what may be lost; `None` for a sound log.
    pub fn report(&self) -> Option<String> {
        if let Some(problem) = self.scan.problem().filter(|_| !self.own_cut()) {
            return Some(format!("{} is damaged: {problem}.", self.path.display()));
        }
        let mark = self.behind()?;
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(mark.at_ms);
        Some(format!(
            "{} went backwards: it holds {} committed frames, but the daemon saw {} in it \
             (same salts) at {}. SQLite would silently drop the {} frames after frame {}, \
             and the acknowledged updates committed in them.",
            self.path.display(),
            self.scan.committed,
            mark.committed,
            humantime::format_rfc3339_seconds(at),
            mark.committed - self.scan.committed,
            self.scan.committed,
        ))
    }

    /// True when the log ends inside a frame exactly where the daemon's own failed
    /// write left it (see [`mark::note_failed_write`]): no byte was cut since.
    pub fn own_cut(&self) -> bool {
        let cut = matches!(self.scan.damage, Some(wal::Damage::Cut { .. }));
        cut && self.mark.is_some_and(|mark| {
            Some(mark.salts) == self.scan.salts && mark.torn_at == Some(self.scan.bytes)
        })
    }

    /// The mark, when the log holds fewer committed frames than it says were there.
    /// Only under the same salts: a checkpoint that starts the log again changes them.
    pub fn behind(&self) -> Option<Mark> {
        let mark = self.mark?;
        let same_log = self.scan.salts == Some(mark.salts);
        (same_log && self.scan.committed < mark.committed).then_some(mark)
    }
}

/// Reads the log of `db` and its mark. Only while nothing writes the log (see
/// [`wal::scan`]).
pub fn check_log(db: &Path) -> std::io::Result<LogCheck> {
    let path = wal_path(db);
    let scan = wal::scan(&path)?;
    Ok(LogCheck {
        path,
        scan,
        mark: mark::read(db),
    })
}

/// Waits up to `limit` until no other process has `db` open, as SQLite itself tells:
/// every connection holds a shared lock on the "deadman switch" byte of the `-shm`
/// file. The daemon's lock keeps other daemons out, not other programs (or a killed
/// daemon's last moment, its files closing one by one as it exits); reading the log
/// while another connection writes it would take a frame being written for a cut one.
/// The pid of a process that still has it open.
pub fn await_sole_user(db: &Path, limit: std::time::Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let holder = other_user(db)?;
        if std::time::Instant::now() >= deadline {
            return Some(holder);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A process other than this one holding a lock on the `-shm` file's deadman switch.
fn other_user(db: &Path) -> Option<i32> {
    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc;
    // SQLite's unix VFS: 8 lock bytes from 120, then the deadman switch.
    const DEADMAN_SWITCH: libc::off_t = 128;
    let shm = std::fs::File::open(sibling(db, "-shm")).ok()?;
    let mut lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: DEADMAN_SWITCH,
        l_len: 1,
        l_pid: 0,
    };
    fcntl(&shm, FcntlArg::F_GETLK(&mut lock)).ok()?;
    (lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid)
}

/// True for the errors SQLite gives on a damaged database file: it cannot be read as
/// a database, or its pages do not hold together.
pub fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// What SQLite says of a damaged database file, in the words of [`LogCheck::report`].
pub fn database_report(db: &Path, said: &str) -> String {
    format!(
        "{} is damaged: SQLite says \"{said}\". The records in its damaged pages (agents, \
         sessions, shared state) may be lost.",
        db.display()
    )
}

/// What `quick_check` found in a database file, in the same words.
pub fn pages_report(db: &Path, rows: &[String]) -> String {
    format!(
        "{} is damaged: quick_check found {}. The records in its damaged pages (agents, \
         sessions, shared state) may be lost.",
        db.display(),
        rows.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(salts: (u32, u32), committed: u64, mark: Mark) -> LogCheck {
        LogCheck {
            path: PathBuf::from("grove.db-wal"),
            scan: Scan {
                salts: Some(salts),
                committed,
                ..Scan::default()
            },
            mark: Some(mark),
        }
    }

    #[test]
    fn a_log_behind_its_mark_went_backwards_but_only_under_the_same_salts() {
        let mark = Mark {
            salts: (7, 8),
            committed: 90,
            at_ms: 0,
            torn_at: None,
        };
        let report = checked((7, 8), 40, mark).report().expect("went back");
        assert!(report.contains("went backwards"), "{report}");
        assert!(report.contains("the 50 frames after frame 40"), "{report}");
        // Caught up, or a log a checkpoint started again: nothing to say.
        assert_eq!(checked((7, 8), 90, mark).report(), None);
        assert_eq!(checked((8, 1), 3, mark).report(), None);
    }
}

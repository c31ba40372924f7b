//! The database's write-ahead log read the way SQLite reads it when it opens the
//! database after every connection has gone (the file-format document, "WAL file
//! format"), to find out before SQLite does whether it will silently drop committed
//! transactions.
//!
//! SQLite trusts the longest prefix of frames whose salts match the header's and
//! whose cumulative checksums hold, and uses it up to its last commit frame. Whatever
//! follows is dropped without a word: a torn frame from a crash looks the same to it
//! as 8 KiB of garbage in the middle of a day's commits. This module tells the two
//! apart from what a crash can and cannot leave behind:
//!
//! - A crash leaves at most one transaction unfinished, at the end of the frames of
//!   the current salt: never a commit frame after a frame that fails. So an intact
//!   commit frame of the current salt after the first bad frame is a lost commit.
//! - SQLite writes a frame's 24-byte header and its page in two writes: a file ending
//!   just after a frame header is a crash; one ending inside a page of the current
//!   salt was cut (truncated), or a kill landed inside that one `write` (then only an
//!   unacknowledged transaction is at stake, and `grove daemon recover` loses nothing).
//! - After a checkpoint SQLite starts the log again from its first frame with new
//!   salts and leaves the older frames behind it: frames of another salt after the
//!   current ones are normal and never damage.
//! - A header that does not check out makes SQLite ignore every frame: with frames
//!   behind it, that is damage (SQLite writes the 32-byte header in one write).
//!
//! A power cut in the middle of a commit can persist that commit's frames out of order
//! or cut one short, and then reads as damage too. The daemon then refuses to start
//! when it need not, but loses nothing by it: with `synchronous=FULL` every
//! acknowledged commit was synced, so it is in the intact prefix that `grove daemon
//! recover` keeps. Refusing a store that may have lost acknowledged writes is the side
//! to err on.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

const HEADER: usize = 32;
const FRAME_HEADER: usize = 24;
const MAGIC: u32 = 0x377f_0682;
const VERSION: u32 = 3_007_000;

/// What the log holds, as SQLite will read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scan {
    /// The file's size; 0 when there is no log.
    pub bytes: u64,
    /// The header's salts, when the header checks out.
    pub salts: Option<(u32, u32)>,
    /// Bytes per frame (page size + 24), when the header checks out.
    pub frame_size: u64,
    /// Frames SQLite will use: up to the last commit frame of the intact prefix.
    pub committed: u64,
    /// Commits in that prefix.
    pub commits: u64,
    pub damage: Option<Damage>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The header does not check out, so SQLite ignores every frame after it.
    Header { frames: u64, why: &'static str },
    /// Intact commits of the current salt follow a frame that fails: SQLite stops at
    /// the bad frame and drops them.
    LostCommits {
        bad_frame: u64,
        commits: u64,
        last_frame: u64,
    },
    /// The file ends inside a page of the current salt.
    Cut { frame: u64, bytes: u64 },
}

impl Scan {
    /// What is wrong and what SQLite would make of it, or `None` for a sound log.
    pub fn problem(&self) -> Option<String> {
        Some(match self.damage.as_ref()? {
            Damage::Header { frames, why } => format!(
                "its header is unreadable ({why}). SQLite would ignore all {frames} frames \
                 after it, silently dropping every update since the database was last \
                 checkpointed"
            ),
            Damage::LostCommits {
                bad_frame,
                commits,
                last_frame,
            } => format!(
                "frame {bad_frame} is unreadable and {commits} intact commits follow it (up \
                 to frame {last_frame}). SQLite stops at the first bad frame, so it would \
                 silently drop those {commits} committed transactions, each holding one or \
                 more acknowledged updates"
            ),
            Damage::Cut { frame, bytes } => format!(
                "it ends inside frame {frame} ({bytes} of its {} bytes): it was cut short. \
                 SQLite would read up to frame {}, its last whole commit, and silently drop \
                 whatever was committed after it; what was cut off cannot be counted",
                self.frame_size, self.committed
            ),
        })
    }
}

/// Reads the log at `path` (none is a sound, empty log). Run it while no connection
/// writes the log (before the daemon opens the database, or on its database thread):
/// a write in flight could look like a cut.
pub fn scan(path: &Path) -> io::Result<Scan> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(e),
    };
    let bytes = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut scan = Scan {
        bytes,
        ..Scan::default()
    };
    // A header SQLite did not finish writing: it holds no frames yet.
    if bytes <= HEADER as u64 {
        return Ok(scan);
    }
    let mut header = [0u8; HEADER];
    reader.read_exact(&mut header)?;
    let header = match Header::parse(&header) {
        Ok(header) => header,
        Err(why) => {
            // Without a page size from the header, count frames of the common size.
            let frames = (bytes - HEADER as u64).div_ceil(4096 + FRAME_HEADER as u64);
            scan.damage = Some(Damage::Header { frames, why });
            return Ok(scan);
        }
    };
    scan.salts = Some(header.salts);
    scan.frame_size = header.page_size as u64 + FRAME_HEADER as u64;
    frames(&mut reader, &header, &mut scan)?;
    Ok(scan)
}

struct Header {
    big_endian: bool,
    page_size: u32,
    salts: (u32, u32),
    checksum: [u32; 2],
}

impl Header {
    fn parse(bytes: &[u8; HEADER]) -> Result<Header, &'static str> {
        let magic = be32(&bytes[0..]);
        if magic & !1 != MAGIC {
            return Err("no WAL magic number");
        }
        let page_size = be32(&bytes[8..]);
        if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
            return Err("impossible page size");
        }
        // The low bit of the magic says in which byte order the checksums add words.
        let big_endian = magic & 1 == 1;
        let checksum = checksum(big_endian, &bytes[..24], [0, 0]);
        if checksum != [be32(&bytes[24..]), be32(&bytes[28..])] {
            return Err("bad header checksum");
        }
        if be32(&bytes[4..]) != VERSION {
            return Err("unknown WAL version");
        }
        Ok(Header {
            big_endian,
            page_size,
            salts: (be32(&bytes[16..]), be32(&bytes[20..])),
            checksum,
        })
    }
}

/// One frame as read: whether it belongs to the current log and checks out against
/// the frame before it.
struct Frame {
    commit: bool,
    current: bool,
    /// Its checksum chains on from the stored checksum of the frame before it: its
    /// bytes are as SQLite wrote them, whatever came before.
    intact: bool,
    stored: [u32; 2],
}

fn read_frame(frame: &[u8], header: &Header, before: [u32; 2]) -> Frame {
    let page_number = be32(&frame[0..]);
    let salts = (be32(&frame[8..]), be32(&frame[12..]));
    let stored = [be32(&frame[16..]), be32(&frame[20..])];
    let current = salts == header.salts && page_number != 0;
    let sum = checksum(header.big_endian, &frame[..8], before);
    let sum = checksum(header.big_endian, &frame[FRAME_HEADER..], sum);
    Frame {
        commit: be32(&frame[4..]) != 0,
        current,
        intact: current && sum == stored,
        stored,
    }
}

/// Walks every whole frame, then looks at what is left after the last one.
fn frames(reader: &mut impl Read, header: &Header, scan: &mut Scan) -> io::Result<()> {
    let frame_size = scan.frame_size as usize;
    let whole = (scan.bytes - HEADER as u64) / scan.frame_size;
    let mut buffer = vec![0u8; frame_size];
    let mut before = header.checksum;
    // The first frame that fails, once one has.
    let mut bad: Option<u64> = None;
    let mut lost_commits = 0;
    let mut last_lost = 0;
    let mut last_current = false;
    for index in 1..=whole {
        reader.read_exact(&mut buffer)?;
        let frame = read_frame(&buffer, header, before);
        before = frame.stored;
        last_current = frame.current;
        match bad {
            None if frame.intact => {
                if frame.commit {
                    scan.committed = index;
                    scan.commits += 1;
                }
            }
            None => bad = Some(index),
            Some(_) if frame.intact && frame.commit => {
                lost_commits += 1;
                last_lost = index;
            }
            Some(_) => {}
        }
    }
    if lost_commits > 0 {
        scan.damage = Some(Damage::LostCommits {
            bad_frame: bad.unwrap_or_default(),
            commits: lost_commits,
            last_frame: last_lost,
        });
        return Ok(());
    }
    let rest = ((scan.bytes - HEADER as u64) % scan.frame_size) as usize;
    if rest == 0 {
        return Ok(());
    }
    // What is left of a last frame. Its own header says whose it is; a header cut short
    // belongs with the frame before it.
    let mut tail = vec![0u8; rest];
    reader.read_exact(&mut tail)?;
    let current = if rest >= FRAME_HEADER {
        (be32(&tail[8..]), be32(&tail[12..])) == header.salts
    } else {
        whole == 0 || last_current
    };
    if current && rest != FRAME_HEADER {
        scan.damage = Some(Damage::Cut {
            frame: whole + 1,
            bytes: rest as u64,
        });
    }
    Ok(())
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// SQLite's WAL checksum: two running sums over pairs of 32-bit words, carried from the
/// header through every frame.
fn checksum(big_endian: bool, data: &[u8], seed: [u32; 2]) -> [u32; 2] {
    let [mut s1, mut s2] = seed;
    for pair in data.chunks_exact(8) {
        let word = |b: &[u8]| {
            let b = [b[0], b[1], b[2], b[3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        s1 = s1.wrapping_add(word(&pair[..4])).wrapping_add(s2);
        s2 = s2.wrapping_add(word(&pair[4..])).wrapping_add(s1);
    }
    [s1, s2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;
    use std::fs;
    use std::path::PathBuf;

    /// A database with `commits` transactions of one row each, all still in its log
    /// (no checkpoint); returns the copies of the database and its log as a kill -9
    /// would leave them, and the connection (still open).
    fn logged(dir: &Path, commits: u32) -> (Connection, PathBuf, PathBuf) {
        let path = dir.join("t.db");
        let conn = Connection::open(&path).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no checkpoints");
        conn.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY, pad TEXT)")
            .expect("table");
        for n in 0..commits {
            conn.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                rusqlite::params![n, "x".repeat(300)],
            )
            .expect("insert");
        }
        let (db, wal) = (dir.join("copy.db"), dir.join("copy.db-wal"));
        fs::copy(&path, &db).expect("copy db");
        fs::copy(dir.join("t.db-wal"), &wal).expect("copy wal");
        (conn, db, wal)
    }

    /// The rows SQLite itself reads from a copy.
    fn rows_sqlite_reads(db: &Path) -> u64 {
        let conn = Connection::open(db).expect("open copy");
        conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get::<_, i64>(0))
            .expect("count") as u64
    }

    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = fs::OpenOptions::new().write(true).open(path).expect("open");
        file.seek(SeekFrom::Start(at)).expect("seek");
        file.write_all(bytes).expect("write");
    }

    fn garbage(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7919 % 251) as u8 ^ 0x5a).collect()
    }

    #[test]
    fn an_intact_log_is_read_as_sqlite_reads_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (_conn, db, wal) = logged(dir.path(), 50);
        let scan = scan(&wal).expect("scan");
        assert_eq!(scan.damage, None, "{scan:?}");
        // The table's creation and 50 inserts.
        assert_eq!(scan.commits, 51, "{scan:?}");
        assert_eq!(scan.bytes, HEADER as u64 + scan.committed * scan.frame_size);
        assert_eq!(rows_sqlite_reads(&db), 50);
    }

    #[test]
    fn a_log_cut_inside_a_page_is_damage_and_after_a_frame_header_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let (_conn, db, wal) = logged(dir.path(), 50);
        let whole = scan(&wal).expect("scan");
        let middle = HEADER as u64 + 20 * whole.frame_size + 1000;
        fs::OpenOptions::new()
            .write(true)
            .open(&wal)
            .and_then(|f| f.set_len(middle))
            .expect("cut");
        let cut = scan(&wal).expect("scan");
        assert_eq!(
            cut.damage,
            Some(Damage::Cut {
                frame: 21,
                bytes: 1000
            }),
            "{cut:?}"
        );
        // A kill between a frame's header and its page leaves this.
        let after_header = HEADER as u64 + 20 * whole.frame_size + FRAME_HEADER as u64;
        fs::OpenOptions::new()
            .write(true)
            .open(&wal)
            .and_then(|f| f.set_len(after_header))
            .expect("cut");
        let torn = scan(&wal).expect("scan");
        assert_eq!(torn.damage, None, "{torn:?}");
        assert_eq!(torn.commits, cut.commits);
        // What SQLite keeps is what the scan says it will (it checkpoints and removes
        // the copy's log as it closes: this comes last).
        assert_eq!(rows_sqlite_reads(&db) + 1, cut.commits);
    }

    #[test]
    fn garbage_in_the_middle_loses_the_commits_after_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (_conn, db, wal) = logged(dir.path(), 50);
        let whole = scan(&wal).expect("scan");
        overwrite(
            &wal,
            HEADER as u64 + 20 * whole.frame_size + 100,
            &garbage(8192),
        );
        let damaged = scan(&wal).expect("scan");
        let Some(Damage::LostCommits { commits, .. }) = damaged.damage else {
            panic!("{damaged:?}");
        };
        // The garbage covers two frames and a bit: what it hid, SQLite loses with them.
        assert!(commits > 0, "{damaged:?}");
        assert!(damaged.commits + commits < whole.commits, "{damaged:?}");
        assert_eq!(rows_sqlite_reads(&db) + 1, damaged.commits);
    }

    #[test]
    fn a_damaged_header_hides_every_frame() {
        let dir = tempfile::tempdir().expect("dir");
        let (_conn, db, wal) = logged(dir.path(), 5);
        overwrite(&wal, 16, &[1, 2, 3, 4]);
        let damaged = scan(&wal).expect("scan");
        assert!(
            matches!(damaged.damage, Some(Damage::Header { .. })),
            "{damaged:?}"
        );
        // SQLite reads the database as if the log were empty: not even the table.
        assert!(Connection::open(&db)
            .expect("open")
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get::<_, i64>(0))
            .is_err());
    }

    #[test]
    fn frames_left_from_before_a_checkpoint_are_not_damage() {
        let dir = tempfile::tempdir().expect("dir");
        let (conn, _, _) = logged(dir.path(), 100);
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .expect("checkpoint");
        // The next write starts the log again from its first frame, with new salts.
        for n in 1000..1010 {
            conn.execute("INSERT INTO t VALUES (?1, 'y')", [n])
                .expect("insert");
        }
        let before = scan(&dir.path().join("t.db-wal")).expect("scan");
        assert_eq!(before.damage, None, "{before:?}");
        assert_eq!(before.commits, 10, "{before:?}");
        assert!(before.bytes > HEADER as u64 + before.committed * before.frame_size);
        let db = dir.path().join("copy2.db");
        fs::copy(dir.path().join("t.db"), &db).expect("copy");
        fs::copy(dir.path().join("t.db-wal"), dir.path().join("copy2.db-wal")).expect("copy");
        assert_eq!(rows_sqlite_reads(&db), 110);
    }

    #[test]
    fn no_log_is_an_empty_log() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(
            scan(&dir.path().join("none-wal")).expect("scan"),
            Scan::default()
        );
    }
}

use crate::types::Outcome;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

pub const EXIT_RECORD_FILE: &str = "exit.json";

/// How the agent's command ended, written once by the shim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// Why the command could not be started, when it could not.
    pub error: Option<String>,
    /// CPU time (user + system) of the whole tree, in milliseconds.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// Peak memory of the tree in bytes (see `AgentRecord::peak_memory_bytes`).
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
}

/// Room taken for the record when the agent starts: far more than a record needs.
const RESERVED_BYTES: u64 = 64 * 1024;

impl ExitRecord {
    /// Takes the room the record at `path` will need, so that a disk that fills up
    /// while the agent runs cannot keep its end from being recorded (it would be taken
    /// for `lost`): the record is later written over these bytes.
    ///
    /// Not synced: the filesystem takes the room when the write returns (delayed
    /// allocation reserves it then, tmpfs holds the pages), and a sync would only make
    /// it outlive a crash of the machine, which the shim does not outlive either. The
    /// sync was an fsync on every agent's start, before its command ran.
    /// Copied through a stack buffer: 64 KiB taken from the heap for it stayed in the
    /// shim's resident memory for the agent's whole life.
    pub fn reserve(path: &Path) -> io::Result<()> {
        let mut file = fs::File::create(tmp_path(path))?;
        let mut room = io::repeat(b' ').take(RESERVED_BYTES);
        io::copy(&mut room, &mut file).map(drop)
    }

    /// Writes the record so that a reader sees either nothing or all of it, over the
    /// room [`ExitRecord::reserve`] took when there is some.
    pub fn write_atomically(&self, path: &Path) -> io::Result<()> {
        let tmp = tmp_path(path);
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        file.set_len(bytes.len() as u64)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn tmp_path(path: &Path) -> std::path::PathBuf {
    path.with_extension("json.tmp")
}

/// Reads an exit record; `Ok(None)` when there is none yet.
pub fn read_exit_record(path: &Path) -> io::Result<Option<ExitRecord>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

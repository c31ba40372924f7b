use grove_proto::types::Outcome;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
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

impl ExitRecord {
    /// Writes the record so that a reader sees either nothing or all of it.
    pub fn write_atomically(&self, path: &Path) -> io::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(self).map_err(io::Error::other)?)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
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

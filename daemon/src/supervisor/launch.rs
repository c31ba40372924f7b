//! Starting a shim.

use grove_agent_shim::ShimSpec;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Starts `grove __shim` in `cwd` with its output going to `log`, hands it `spec` on
/// stdin and returns its pid. The shim detaches itself (setsid) and needs nothing more
/// from us.
pub fn launch(exe: &Path, spec: &ShimSpec, cwd: &Path, log: &Path) -> io::Result<u32> {
    let log_file = OpenOptions::new().create(true).append(true).open(log)?;
    let mut child = Command::new(exe)
        .arg("__shim")
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()?;
    let pid = child.id();
    let spec_json = serde_json::to_vec(spec).map_err(io::Error::other)?;
    let written = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("shim has no stdin"))
        .and_then(|mut stdin| stdin.write_all(&spec_json));
    if let Err(e) = written {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    // The child is reaped by the exit watcher (supervisor::watch), not by `Child`.
    Ok(pid)
}

//! Starting a shim.

use grove_proto::shim::{ShimProgram, ShimSpec, SHIM_ARG};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;

/// Starts the shim of the grove executable `exe` (`X-shim __shim`, or `X __shim` without
/// it; see [`shim_program`]) in `cwd` with its output going to `log`, hands it `spec` on
/// stdin and returns its pid. The shim detaches itself (setsid) and needs nothing more
/// from us.
pub fn launch(exe: &Path, spec: &ShimSpec, cwd: &Path, log: &Path) -> io::Result<u32> {
    let log_file = OpenOptions::new().create(true).append(true).open(log)?;
    let mut command = Command::new(shim_program(exe));
    command
        .arg(SHIM_ARG)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    #[cfg(all(feature = "test-hooks", debug_assertions))]
    if let Some(value) = std::env::var_os(grove_sys::TEST_CGROUP_BY_JOINING) {
        command.env(grove_sys::TEST_CGROUP_BY_JOINING, value);
    }
    let mut child = command.spawn()?;
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

/// The program to start as a shim. Looked up at every launch, which costs one stat: a
/// `grove-shim` installed (or removed) while the daemon runs is taken into account at
/// once. Which one it is gets logged once, at the first call (the daemon makes it at
/// start-up), as a missing shim binary costs memory for every agent.
pub fn shim_program(exe: &Path) -> PathBuf {
    static LOGGED: Once = Once::new();
    let program = ShimProgram::for_exe(exe);
    LOGGED.call_once(|| match &program {
        ShimProgram::Separate(path) => {
            tracing::info!(shim = %path.display(), "agents are held by the shim binary")
        }
        ShimProgram::Fallback { exe, missing } => tracing::warn!(
            shim = %exe.display(),
            missing = %missing.display(),
            "no shim binary next to the grove executable: agents are held by `{} {SHIM_ARG}`, \
             which takes more memory per agent; install both (`cargo install --path ctl`)",
            exe.display()
        ),
    });
    program.program().to_path_buf()
}

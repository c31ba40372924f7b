//! Runs a schema's migration steps on a state (state-semantics.md, 36). A step with a
//! jq conversion runs in a child `grove __state-convert` with limits on its CPU time,
//! wall-clock time and address space, so that an expression that does not end, or builds a huge value,
//! is stopped by the kernel instead of holding the sessions task or the daemon's
//! memory; steps that only rename, drop and map run here.

use grove_state::chain::{self, Carried, ConvertInput, ConvertOutput, Migration, StepError};
use grove_state::State;
use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// CPU seconds a chain's conversions may take in all.
pub const CPU_SECONDS: u64 = 2;
/// Address space of the converter, in bytes.
pub const MEMORY_BYTES: u64 = 512 << 20;
/// Wall-clock time the converter may take: on a loaded machine its CPU seconds take
/// longer, and the sessions task waits for a migration's conversions.
pub const WALL_SECONDS: u64 = 10;

/// Why a chain did not give a state.
pub enum Failed {
    /// A step could not take the state: which step, which channel, why.
    Step(StepError),
    /// The converter went past its limits or could not run.
    Converter(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Step(error) => error.fmt(f),
            Failed::Converter(reason) => f.write_str(reason),
        }
    }
}

/// `state` taken through `steps`.
pub async fn carry(steps: &[Migration], state: State) -> Result<Carried, Failed> {
    if !steps.iter().any(Migration::converts) {
        return chain::carry(steps, state).map_err(Failed::Step);
    }
    let input = serde_json::to_vec(&ConvertInput::new(steps, state))
        .map_err(|e| Failed::Converter(format!("cannot encode the state: {e}")))?;
    let names: Vec<String> = steps.iter().map(Migration::name).collect();
    let output = tokio::task::spawn_blocking(move || run_converter(&input))
        .await
        .map_err(|e| Failed::Converter(format!("the converter's task failed: {e}")))?
        .map_err(|reason| {
            Failed::Converter(format!("the conversions of {} {reason}", names.join(", ")))
        })?;
    match output {
        ConvertOutput::Carried(carried) => Ok(carried),
        ConvertOutput::Error(error) => Err(Failed::Step(error)),
    }
}

fn run_converter(input: &[u8]) -> Result<ConvertOutput, String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("cannot run: no grove ({e})"))?;
    let mut command = Command::new(exe);
    command
        .arg(chain::CONVERT_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_clear();
    let daemon = std::process::id();
    // SAFETY: between fork and exec the closure makes only async-signal-safe calls
    // (setrlimit, prctl, getppid).
    unsafe {
        command.pre_exec(move || {
            use nix::sys::resource::{setrlimit, Resource};
            setrlimit(Resource::RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 1)?;
            setrlimit(Resource::RLIMIT_AS, MEMORY_BYTES, MEMORY_BYTES)?;
            setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
            grove_sys::supervise::die_with_parent(daemon)
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run: starting the converter failed ({e})"))?;
    let (stop, watchdog) = watchdog(child.id());
    // The converter reads all its input before it writes: no pipe waits on the other.
    let write_error = child
        .stdin
        .take()
        .and_then(|mut s| s.write_all(input).err());
    let mut out = Vec::new();
    let read_error = child
        .stdout
        .take()
        .and_then(|mut s| s.read_to_end(&mut out).err());
    // The watchdog ends before the child is reaped, so its pid cannot be another's.
    drop(stop);
    let killed = watchdog.join().unwrap_or(false);
    let status = child
        .wait()
        .map_err(|e| format!("cannot run: waiting for the converter failed ({e})"))?;
    if killed {
        return Err(format!(
            "took longer than {WALL_SECONDS} s and were stopped; a conversion must end \
             quickly"
        ));
    }
    if !status.success() {
        return Err(stopped(status));
    }
    if let Some(e) = write_error.or(read_error) {
        return Err(format!("cannot run: the converter's pipe failed ({e})"));
    }
    serde_json::from_slice(&out).map_err(|e| format!("gave no answer grove reads ({e})"))
}

/// Kills process `pid` unless told to stop (the sender dropped) within
/// [`WALL_SECONDS`]; its thread says whether it killed.
fn watchdog(pid: u32) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<bool>) {
    use nix::sys::signal::{kill, Signal};
    use std::sync::mpsc::RecvTimeoutError;
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let waited = stopped.recv_timeout(std::time::Duration::from_secs(WALL_SECONDS));
        let late = matches!(waited, Err(RecvTimeoutError::Timeout));
        if late {
            let _ = kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        late
    });
    (stop, thread)
}

fn stopped(status: std::process::ExitStatus) -> String {
    use nix::sys::signal::Signal;
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(signal) if [Signal::SIGXCPU as i32, Signal::SIGKILL as i32].contains(&signal) => {
            format!(
                "took more than {CPU_SECONDS} s of CPU and were stopped; a conversion must \
             end quickly (no unbounded recursion or range)"
            )
        }
        _ => format!(
            "were stopped ({status}): past {} MiB of memory or too deep a recursion; a \
             conversion must give a value of bounded size",
            MEMORY_BYTES >> 20
        ),
    }
}

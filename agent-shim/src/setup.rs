//! A setup command run in a jail with a view of its own (`grove-shim __shim setup`).
//!
//! The daemon runs setup commands before the agent's shim exists, and a view can only
//! be entered by the first process of new namespaces, which needs a single-threaded
//! parent (`grove_sys::view::spawn`): the daemon is not one, so it starts this helper,
//! hands it a [`SetupSpec`] on stdin and reads a [`SetupOutcome`] from its stdout.
//! The command's output goes to the helper's stderr (the agent's log, opened by the
//! daemon). The command runs as a jailed agent does (the shim's jailed runner: the
//! view, Landlock entered before exec) and, being no agent the daemon could place a
//! connection under, makes no Unix socket at all (`grove_sys::no_sockets`).

use crate::jail::Jail;
use crate::runner::Runner;
use grove_proto::shim::{SetupOutcome, SetupSpec};
use nix::sys::wait::{waitpid, WaitStatus};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Entry point of `__shim setup`: always answers on stdout; 0 once it has.
pub fn main_from_stdin() -> i32 {
    let mut input = Vec::new();
    let outcome = match io::stdin().read_to_end(&mut input) {
        Err(e) => SetupOutcome::NotRun(format!("cannot read the setup spec: {e}")),
        Ok(_) => match serde_json::from_slice::<SetupSpec>(&input) {
            Ok(spec) => run(&spec),
            Err(e) => SetupOutcome::NotRun(format!("invalid setup spec: {e}")),
        },
    };
    let answer = serde_json::to_vec(&outcome).unwrap_or_default();
    // Flushed here: the shim binaries have no Rust runtime to flush at exit.
    let mut stdout = io::stdout().lock();
    match stdout.write_all(&answer).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

fn run(spec: &SetupSpec) -> SetupOutcome {
    match start_and_wait(spec) {
        Ok(outcome) => outcome,
        Err(why) => SetupOutcome::NotRun(why),
    }
}

fn start_and_wait(spec: &SetupSpec) -> Result<SetupOutcome, String> {
    let view = spec
        .jail
        .view
        .as_deref()
        .ok_or("a jailed setup command needs a view of its own, and none was given")?;
    let (program, args) = spec.argv.split_first().ok_or("empty setup command")?;
    // Built here, entered by the command: a jail that cannot be had means no run.
    let jail = Jail::build(&spec.jail)?;
    let no_sockets = grove_sys::no_sockets::NoSockets::new().ok_or_else(|| {
        format!(
            "grove cannot keep it from the daemon's socket on {} ({})",
            std::env::consts::ARCH,
            grove_sys::OS
        )
    })?;
    let output = || {
        io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map(Stdio::from)
            .map_err(|e| format!("cannot share the log: {e}"))
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(output()?)
        .stderr(output()?);
    // SAFETY: runs in the child of the view's single-threaded init, before exec, and
    // makes only system calls (prctl, landlock_restrict_self, seccomp).
    unsafe {
        command.pre_exec(move || {
            jail.enter()?;
            no_sockets.install()
        });
    }
    let runner = Runner::Jailed {
        view,
        grace: Duration::from_millis(spec.grace_ms),
    };
    let running = runner
        .start(&mut command, None)
        .map_err(|e| format!("cannot run `{program}` there: {e}"))?;
    let init = loop {
        match waitpid(running.pid, None) {
            Ok(WaitStatus::Exited(_, code)) => break (Some(code), None),
            Ok(WaitStatus::Signaled(_, signal, _)) => break (None, Some(signal as i32)),
            Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
            Err(e) => return Err(format!("cannot wait for the setup command: {e}")),
        }
    };
    Ok(match running.outcome(init) {
        (Some(code), _) => SetupOutcome::Exited(code),
        (None, Some(signal)) => SetupOutcome::Signaled(signal),
        (None, None) => SetupOutcome::Signaled(libc::SIGKILL),
    })
}

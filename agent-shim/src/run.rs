use crate::cgroup::{AgentCgroup, Joiner};
use crate::console::{AgentStdio, Console};
use crate::descendants::{descendants_of, signal_descendants};
use crate::jail::Jail;
use crate::log::Log;
use crate::now_ms;
use crate::relay::Relay;
use crate::runner::{Runner, Running};
use crate::ExitRecord;
use crate::ShimSpec;
use grove_proto::types::{Limits, Outcome};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, setpgid, setsid, Pid};
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Entry point of a shim (`grove-shim __shim` or `grove __shim`): reads the spec from stdin, runs the agent, returns the
/// shim's own exit code (0 once the exit record is written).
pub fn main_from_stdin() -> i32 {
    if !grove_sys::AGENTS_SUPPORTED {
        eprintln!(
            "grove shim: not supported on this OS ({}); agents run on Linux only",
            grove_sys::OS
        );
        return 2;
    }
    let mut input = Vec::new();
    if let Err(e) = io::stdin().read_to_end(&mut input) {
        eprintln!("grove shim: cannot read the spec from stdin: {e}");
        return 2;
    }
    match serde_json::from_slice::<ShimSpec>(&input) {
        Ok(spec) => run(&spec),
        Err(e) => {
            eprintln!("grove shim: invalid spec on stdin: {e}");
            2
        }
    }
}

/// Why the shim is stopping the tree, if it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Killed,
    TimedOut,
}

fn run(spec: &ShimSpec) -> i32 {
    if let Some(lock) = &spec.daemon_lock {
        crate::descendants::spare_daemon(lock.clone());
    }
    // A session of our own: the terminal's and the daemon's signals no longer reach us.
    let _ = setsid();
    become_subreaper();
    let signals = supervised_signals();
    if let Err(e) = signals.thread_block() {
        eprintln!("grove shim: cannot block signals: {e}");
        return 2;
    }
    if let Some(claim) = &spec.claim {
        match claim_start(claim) {
            Ok(()) => {}
            Err(e) => {
                eprintln!(
                    "grove shim: cannot claim this start ({}): {e}",
                    claim.display()
                );
                return 2;
            }
        }
        if spec.abandon.as_ref().is_some_and(|a| a.exists()) {
            eprintln!("grove: a restarted daemon gave this start up; the agent starts again");
            return 0;
        }
    }
    let started_at_ms = now_ms();
    if let Err(e) = ExitRecord::reserve(&spec.exit_record) {
        eprintln!(
            "grove shim: cannot reserve room for the exit record {}: {e}",
            spec.exit_record.display()
        );
    }
    let cgroup = (spec.cgroup || spec.jail.is_some())
        .then(|| AgentCgroup::create(&spec.agent_id))
        .flatten();
    let pids = match limit_processes(spec, cgroup.as_ref()) {
        Ok(pids) => pids,
        Err(message) => {
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            return fail_start(spec, started_at_ms, message);
        }
    };
    let opened = open_log(spec).and_then(|log| match &spec.console {
        Some(c) => Console::open(c, &signals, log, spec.log.is_some())
            .map(|(console, stdio)| (Some(console), None, Some(stdio))),
        // Without a budget the agent may write to the log file itself.
        None if spec.log.is_none() => Ok((None, None, None)),
        None => Relay::open(log, &signals).map(|(relay, output)| {
            let stdio = AgentStdio {
                stdin: None,
                output: Some(output),
                terminal: false,
            };
            (None, Some(relay), Some(stdio))
        }),
    });
    let (mut console, mut relay, stdio) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            if let Some(pids) = pids {
                pids.remove();
            }
            return fail_start(
                spec,
                started_at_ms,
                format!("cannot open the agent's terminal or log: {e}"),
            );
        }
    };
    if let (Some(console), Some(path)) = (console.as_mut(), &spec.stdin) {
        // Input piped into `grove spawn` is the first thing the agent reads from its
        // terminal or kept-open stdin.
        match take_input(path).and_then(|mut file| {
            let mut bytes = Vec::new();
            io::Read::read_to_end(&mut file, &mut bytes).map(|_| bytes)
        }) {
            Ok(bytes) => console.queue_input(bytes),
            Err(e) => eprintln!(
                "grove shim: cannot read the agent's input {}: {e}",
                path.display()
            ),
        }
    }
    let (exit_code, exit_signal, stop, error) =
        match start_command(spec, cgroup.as_ref(), pids.as_ref(), stdio) {
            Ok(running) => {
                let mut waiter = match (console.as_mut(), relay.as_mut()) {
                    (Some(console), _) => Waiter::Console(console),
                    (None, Some(relay)) => Waiter::Relay(relay),
                    (None, None) => Waiter::Signals(&signals),
                };
                let (code, signal, stop) = supervise(&running, spec, &mut waiter, cgroup.as_ref());
                (code, signal, stop, None)
            }
            Err(failure) => {
                eprintln!("grove: {}", failure.message);
                (Some(failure.exit_code), None, None, Some(failure.message))
            }
        };
    // The tree is gone: keep what it last wrote, measure it, then clear away its cgroup
    // and temporary files. Viewers stay connected until the exit record is written, so
    // that the daemon learns the outcome as they see the end.
    if let Some(console) = console.as_mut() {
        console.drain();
        let kept = spec
            .exit_record
            .with_file_name(grove_proto::console::LAST_SCREEN_FILE);
        if let Err(e) = console.keep_last_screen(&kept) {
            eprintln!(
                "grove shim: cannot keep the last screen in {}: {e}",
                kept.display()
            );
        }
    }
    if let Some(relay) = relay.as_mut() {
        relay.drain();
    }
    let usage = measure(cgroup.as_ref());
    if let Some(cgroup) = cgroup {
        cgroup.remove();
    }
    if let Some(pids) = pids {
        pids.remove();
    }
    if let Some(tmp) = &spec.tmp_dir {
        if let Err(e) = std::fs::remove_dir_all(tmp) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("grove shim: cannot remove {}: {e}", tmp.display());
            }
        }
    }
    let outcome = match (stop, exit_code) {
        (Some(Stop::Killed), _) => Outcome::Killed,
        (Some(Stop::TimedOut), _) => Outcome::TimedOut,
        (None, Some(0)) => Outcome::Succeeded,
        (None, _) => Outcome::Failed,
    };
    let record = ExitRecord {
        outcome,
        exit_code,
        exit_signal,
        started_at_ms,
        ended_at_ms: now_ms(),
        error,
        cpu_ms: usage.cpu_ms,
        peak_memory_bytes: usage.peak_memory_bytes,
    };
    let written = match record.write_atomically(&spec.exit_record) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "grove shim: cannot write the exit record {}: {e}",
                spec.exit_record.display()
            );
            1
        }
    };
    drop(console);
    written
}

/// What the supervision loop sleeps in between its checks.
enum Waiter<'a> {
    Signals(&'a SigSet),
    Console(&'a mut Console),
    Relay(&'a mut Relay),
}

impl Waiter<'_> {
    fn wait(&mut self, timeout: Option<Duration>) -> Option<Signal> {
        match self {
            Waiter::Signals(signals) => grove_sys::signal::wait_timeout(signals, timeout),
            Waiter::Console(console) => console.wait(timeout),
            Waiter::Relay(relay) => relay.wait(timeout),
        }
    }
}

/// The jail's guarantees rest on a cgroup the agent cannot leave (the daemon places
/// connections by it, and `cgroup.kill` reaches everything in it); a limit on processes
/// rests on a pids cgroup. Either missing means no start.
fn limit_processes(
    spec: &ShimSpec,
    cgroup: Option<&AgentCgroup>,
) -> Result<Option<crate::pids::PidsCgroup>, String> {
    if spec.jail.is_some() && cgroup.is_none() {
        return Err(
            "cannot jail the agent: the jail needs a cgroup v2 of the agent's own \
                    (a writable cgroup2 mount), and none could be made here; spawn without \
                    --jail"
                .into(),
        );
    }
    let Some(max) = spec.limits.max_procs else {
        return Ok(None);
    };
    if cgroup.is_some_and(|c| c.limit_pids(max).is_ok()) {
        return Ok(None);
    }
    crate::pids::PidsCgroup::create(&spec.agent_id, max).map(Some)
}

/// The agent's log: within its budget when the spec gives one, else the shim's own
/// stdout (the log file, opened by the daemon).
fn open_log(spec: &ShimSpec) -> io::Result<Log> {
    match &spec.log {
        Some(log) => Log::open(log.path.clone(), log.max_bytes, true),
        None => {
            use std::os::fd::AsFd;
            let stdout = io::stdout().as_fd().try_clone_to_owned()?;
            Ok(Log::new(std::fs::File::from(stdout)))
        }
    }
}

/// Writes the exit record of a start that never ran the command.
fn fail_start(spec: &ShimSpec, started_at_ms: u64, message: String) -> i32 {
    eprintln!("grove: {message}");
    let record = ExitRecord {
        outcome: Outcome::Failed,
        exit_code: Some(126),
        exit_signal: None,
        started_at_ms,
        ended_at_ms: now_ms(),
        error: Some(message),
        cpu_ms: None,
        peak_memory_bytes: None,
    };
    match record.write_atomically(&spec.exit_record) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "grove shim: cannot write the exit record {}: {e}",
                spec.exit_record.display()
            );
            1
        }
    }
}

/// Writes `{pid, start_time}` to `path`, failing if it exists.
fn claim_start(path: &std::path::Path) -> io::Result<()> {
    use std::io::Write;
    let pid = std::process::id();
    let start_time = grove_sys::proc::start_time(pid).unwrap_or(0);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    writeln!(file, "{{\"pid\": {pid}, \"start_time\": {start_time}}}")?;
    file.sync_all()
}

fn become_subreaper() {
    if let Err(e) = grove_sys::supervise::become_subreaper() {
        eprintln!("grove shim: cannot become child subreaper: {e}");
    }
}

fn supervised_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        set.add(signal);
    }
    set
}

struct StartFailure {
    exit_code: i32,
    message: String,
}

fn start_command(
    spec: &ShimSpec,
    cgroup: Option<&AgentCgroup>,
    pids: Option<&crate::pids::PidsCgroup>,
    stdio: Option<AgentStdio>,
) -> Result<Running, StartFailure> {
    let program = spec.argv.first().ok_or_else(|| StartFailure {
        exit_code: 127,
        message: "empty command".into(),
    })?;
    let cannot = |message: String| StartFailure {
        exit_code: 126,
        message,
    };
    if let Some(tmp) = &spec.tmp_dir {
        std::fs::create_dir_all(tmp)
            .map_err(|e| cannot(format!("cannot create {}: {e}", tmp.display())))?;
    }
    // Built here, entered by the child: a jail that cannot be built means no start,
    // never an unjailed one.
    let jail = spec
        .jail
        .as_ref()
        .map(Jail::build)
        .transpose()
        .map_err(cannot)?;
    let joiner: Option<Joiner> = cgroup
        .filter(|c| !c.born_inside())
        .map(AgentCgroup::joiner)
        .transpose()
        .map_err(|e| cannot(format!("cannot prepare the agent's cgroup: {e}")))?;
    let pids_joiner = pids
        .map(crate::pids::PidsCgroup::joiner)
        .transpose()
        .map_err(|e| cannot(format!("cannot prepare the agent's pids cgroup: {e}")))?;
    // With a console, the piped input was typed into it already (see `run`).
    let stdin = match spec.stdin.as_ref().filter(|_| spec.console.is_none()) {
        Some(path) => Stdio::from(take_input(path).map_err(|e| {
            cannot(format!(
                "cannot open the agent's input {}: {e}",
                path.display()
            ))
        })?),
        None => Stdio::null(),
    };
    let mut command = Command::new(program);
    command
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    let controlling_terminal = stdio.as_ref().is_some_and(|s| s.terminal);
    match stdio {
        Some(AgentStdio {
            stdin: console_stdin,
            output,
            ..
        }) => {
            match console_stdin {
                Some(console_stdin) => command.stdin(Stdio::from(console_stdin)),
                None => command.stdin(stdin),
            };
            if let Some(output) = output {
                let errors = output
                    .try_clone()
                    .map_err(|e| cannot(format!("cannot share the agent's output: {e}")))?;
                command
                    .stdout(Stdio::from(output))
                    .stderr(Stdio::from(errors));
            }
        }
        None => {
            command.stdin(stdin);
        }
    }
    let limits = spec.limits.clone();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (sigprocmask, setpgid, write, setrlimit, prctl,
    // landlock_restrict_self).
    unsafe {
        command.pre_exec(move || {
            SigSet::empty().thread_set_mask()?;
            if controlling_terminal {
                // A session of its own, led by the agent, with the terminal as its
                // controlling terminal: job control, Ctrl-C and SIGWINCH work inside.
                grove_sys::term::take_as_controlling_terminal()?;
            } else {
                setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            }
            if let Some(joiner) = &joiner {
                joiner.join()?;
            }
            if let Some(procs) = &pids_joiner {
                crate::cgroup::join_through(procs)?;
            }
            apply_limits(&limits)?;
            // Last, so that nothing above runs jailed.
            if let Some(jail) = &jail {
                jail.enter()?;
            }
            Ok(())
        });
    }
    let runner = match spec.jail.as_ref().and_then(|j| j.view.as_deref()) {
        Some(view) => Runner::Jailed {
            view,
            grace: Duration::from_millis(spec.grace_ms),
        },
        None => Runner::Plain,
    };
    runner.start(&mut command, cgroup).map_err(|e| {
        // exec's own ENOENT; a jail's view that could not be built says more than its
        // errno (a path it could not show) and is not a missing command.
        if e.kind() == io::ErrorKind::NotFound && e.raw_os_error().is_some() {
            StartFailure {
                exit_code: 127,
                message: format!("cannot run `{program}`: command not found"),
            }
        } else {
            StartFailure {
                exit_code: 126,
                message: format!("cannot run `{program}`: {e}"),
            }
        }
    })
}

/// Opens the agent's input and unlinks it: from here on only the open file holds it.
fn take_input(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    std::fs::remove_file(path)?;
    Ok(file)
}

fn apply_limits(limits: &Limits) -> nix::Result<()> {
    if let Some(files) = limits.max_files {
        setrlimit(Resource::RLIMIT_NOFILE, files, files)?;
    }
    if let Some(bytes) = limits.memory_bytes {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)?;
    }
    if let Some(seconds) = limits.cpu_seconds {
        // SIGXCPU (which says what happened) at the limit, SIGKILL a second later for
        // a process that ignores it.
        setrlimit(Resource::RLIMIT_CPU, seconds, seconds.saturating_add(1))?;
    }
    Ok(())
}

/// Waits for the command, enforcing the timeout and stop requests, and returns once the
/// command and every descendant are gone.
fn supervise(
    running: &Running,
    spec: &ShimSpec,
    waiter: &mut Waiter<'_>,
    cgroup: Option<&AgentCgroup>,
) -> (Option<i32>, Option<i32>, Option<Stop>) {
    let main = running.pid;
    let shim = getpid().as_raw();
    // SIGKILL goes through cgroup.kill first (atomic: no fork can outrun it), then
    // through the /proc walk for anything that left the cgroup.
    let kill_tree = || {
        if let Some(cgroup) = cgroup {
            cgroup.kill_all();
        }
        signal_descendants(shim, Signal::SIGKILL);
    };
    let grace = Duration::from_millis(spec.grace_ms);
    let timeout_at = spec
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let mut main_status: Option<(Option<i32>, Option<i32>)> = None;
    let mut stop: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    let mut leftovers_signalled = false;
    loop {
        reap(main, &mut main_status);
        if main_status.is_some() {
            if descendants_of(shim).is_empty() {
                break;
            }
            if !leftovers_signalled {
                leftovers_signalled = true;
                signal_descendants(shim, Signal::SIGTERM);
                kill_at.get_or_insert(Instant::now() + grace);
            }
        }
        let now = Instant::now();
        if stop.is_none() && timeout_at.is_some_and(|t| now >= t) {
            stop = Some(Stop::TimedOut);
            signal_descendants(shim, Signal::SIGTERM);
            kill_at = Some(now + grace);
        }
        if kill_at.is_some_and(|t| now >= t) {
            kill_tree();
        }
        let wake_at = [kill_at, timeout_at.filter(|_| stop.is_none())]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min();
        match waiter.wait(wake_at.map(|t| t - now)) {
            Some(Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP) if stop.is_none() => {
                stop = Some(Stop::Killed);
                signal_descendants(shim, Signal::SIGTERM);
                kill_at = Some(Instant::now() + grace);
            }
            _ => {}
        }
    }
    let (code, signal) = running.outcome(main_status.unwrap_or((None, None)));
    (code, signal, stop)
}

/// What the tree used, in the exit record's units.
struct TreeUsage {
    cpu_ms: Option<u64>,
    peak_memory_bytes: Option<u64>,
}

/// CPU time and peak memory of the finished tree: from the cgroup where there is one,
/// else (and for memory without the memory controller) from getrusage of the reaped
/// children. The shim is their subreaper, so orphans count too; `ru_maxrss` is the
/// largest resident set of any one process, not the sum.
fn measure(cgroup: Option<&AgentCgroup>) -> TreeUsage {
    let from_cgroup = cgroup.map(AgentCgroup::usage).unwrap_or_default();
    let rusage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).ok();
    let ms = |t: nix::sys::time::TimeVal| {
        (t.tv_sec().max(0) as u64) * 1000 + (t.tv_usec().max(0) as u64) / 1000
    };
    TreeUsage {
        cpu_ms: from_cgroup
            .cpu_usec
            .map(|usec| usec / 1000)
            .or_else(|| rusage.map(|r| ms(r.user_time()) + ms(r.system_time()))),
        peak_memory_bytes: from_cgroup
            .peak_memory_bytes
            .or_else(|| rusage.map(|r| (r.max_rss().max(0) as u64).saturating_mul(1024))),
    }
}

/// Reaps every exited child (orphans included: we are their subreaper).
fn reap(main: Pid, main_status: &mut Option<(Option<i32>, Option<i32>)>) {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == main => {
                *main_status = Some((Some(code), None));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == main => {
                *main_status = Some((None, Some(signal as i32)));
            }
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => return,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

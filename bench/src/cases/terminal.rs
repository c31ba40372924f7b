//! Case 8: an agent's terminal through `grove attach` against the same through tmux, in
//! the same run: keystroke → echo latency (p50, p99), output throughput with a viewer
//! attached, the shim's memory with a terminal, and the daemon's wake-ups with 20 idle
//! agents that have one.
//!
//! Both viewers run on a pseudo terminal this process holds, as a person's terminal
//! emulator would; the agent is `stty raw -echo; cat`, so the echo is the agent's.

use super::Ctx;
use crate::report::{Goal, Metric, Row};
use crate::stats::{ms, percentile, Summary};
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ECHO_AGENT: &str = "stty raw -echo; exec cat";
/// Keys that no escape sequence a terminal or tmux sends ends with.
const KEYS: &[u8] = b"xyzwvk";
const IDLE_AGENTS: usize = 20;
const IDLE_WINDOW: Duration = Duration::from_secs(5);
const IDLE_WINDOWS: usize = 3;
const BLOCKING_THREADS_KEEP_ALIVE: Duration = Duration::from_secs(11);

pub fn run(ctx: &Ctx<'_>) -> Result<Vec<Row>> {
    if Command::new("tmux").arg("-V").output().is_err() {
        return Ok(vec![Row::not_available(
            "8",
            "terminal vs tmux",
            "n/a (tmux is not installed)",
        )]);
    }
    let keystrokes = if ctx.quick { 200 } else { 1000 };
    let megabytes = if ctx.quick { 20 } else { 100 };
    let repo = ctx.repos.tiny()?;
    let (grove_echo, tmux_echo) = latency(ctx, &repo.path, keystrokes)?;
    let (grove_rate, tmux_rate) = throughput(ctx, &repo.path, megabytes)?;
    let (shim_rss, wakeups) = idle_agents(ctx, &repo.path)?;
    let p99 = |samples: &[f64]| {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Summary::single(percentile(&sorted, 99.0))
    };
    Ok(vec![
        Row::new("8", "keystroke → echo, p50", "ms")
            .grove(Summary::of(&grove_echo))
            .baseline("tmux attach", Summary::of(&tmux_echo))
            .goal(Goal::at_most(Metric::Ratio, 1.0)),
        Row::new("8", "keystroke → echo, p99", "ms")
            .grove(Some(p99(&grove_echo)))
            .baseline("tmux attach", Some(p99(&tmux_echo)))
            .goal(Goal::at_most(Metric::Ratio, 1.0)),
        Row::new("8", format!("{megabytes} MB of output, one viewer"), "MB/s")
            .grove(Summary::of(&grove_rate))
            .baseline("tmux attach", Summary::of(&tmux_rate))
            .goal(Goal::at_least(Metric::Ratio, 0.8)),
        Row::new("8", "shim RSS with a terminal", "MiB")
            .grove(Summary::of(&shim_rss))
            .goal(Goal::at_most(Metric::Median, 3.0)),
        Row::new(
            "8",
            format!(
                "daemon wake-ups, {IDLE_AGENTS} idle tty agents, per {}s",
                IDLE_WINDOW.as_secs()
            ),
            "",
        )
        .grove(Summary::of(&wakeups))
        .goal(Goal::at_most(Metric::Median, 0.0)),
    ])
}

/// A viewer (`grove attach` or `tmux attach`) on a pseudo terminal of ours.
struct Viewer {
    child: Child,
    master: File,
}

impl Viewer {
    fn start(mut command: Command) -> Result<Viewer> {
        let size = nix::pty::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).context("opening a pty")?;
        let side = File::from(pty.slave);
        let child = command
            .stdin(side.try_clone()?)
            .stdout(side.try_clone()?)
            .stderr(side)
            .spawn()
            .context("starting the viewer")?;
        Ok(Viewer {
            child,
            master: File::from(pty.master),
        })
    }

    /// Reads until `byte` arrives (or the deadline passes).
    fn until(&mut self, byte: u8, deadline: Instant) -> Result<()> {
        let mut buf = [0u8; 65536];
        loop {
            if Instant::now() > deadline {
                bail!("the viewer never echoed {:?}", byte as char);
            }
            let n = self.master.read(&mut buf)?;
            if buf[..n].contains(&byte) {
                return Ok(());
            }
        }
    }

    /// Reads whatever comes for `quiet`, to start measuring on a settled screen.
    fn settle(&mut self, quiet: Duration) {
        let fd = std::os::fd::AsFd::as_fd(&self.master).try_clone_to_owned();
        if let Ok(fd) = fd {
            let mut buf = [0u8; 65536];
            loop {
                let mut fds = [nix::poll::PollFd::new(
                    std::os::fd::AsFd::as_fd(&fd),
                    nix::poll::PollFlags::POLLIN,
                )];
                let timeout = nix::poll::PollTimeout::try_from(quiet.as_millis() as i32)
                    .unwrap_or(nix::poll::PollTimeout::MAX);
                match nix::poll::poll(&mut fds, timeout) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if self.master.read(&mut buf).unwrap_or(0) == 0 {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Drains output on a thread of its own, so that the viewer never blocks on us.
    fn drain(self) -> Child {
        let mut master = self.master;
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while master.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        self.child
    }

    /// One key typed and its echo awaited; the time it took, in ms.
    fn keystroke(&mut self, key: u8) -> Result<f64> {
        let start = Instant::now();
        self.master.write_all(&[key])?;
        self.until(key, start + Duration::from_secs(10))?;
        let took = ms(start.elapsed());
        // Let the viewer finish its redraw before the next key.
        self.settle(Duration::from_millis(2));
        Ok(took)
    }
}

/// Keystroke → echo through both viewers, key for key in turn (who goes first
/// alternates), so that a busy moment of the machine falls on both alike.
fn keystrokes(grove: &mut Viewer, tmux: &mut Viewer, n: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    grove.settle(Duration::from_millis(500));
    tmux.settle(Duration::from_millis(500));
    let (mut through_grove, mut through_tmux) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let key = KEYS[i % KEYS.len()];
        if i % 2 == 0 {
            through_grove.push(grove.keystroke(key)?);
            through_tmux.push(tmux.keystroke(key)?);
        } else {
            through_tmux.push(tmux.keystroke(key)?);
            through_grove.push(grove.keystroke(key)?);
        }
    }
    Ok((through_grove, through_tmux))
}

fn grove_viewer(ctx: &Ctx<'_>, repo: &Path, id: &str) -> Result<Viewer> {
    let mut command = ctx.env.grove_command(repo);
    command.args(["attach", id]);
    Viewer::start(command)
}

fn spawn_tty(ctx: &Ctx<'_>, repo: &Path, script: &str) -> Result<String> {
    let record = ctx
        .env
        .grove_json(repo, &["spawn", "--tty", "--", "sh", "-c", script])?;
    ctx.env.records.set(ctx.env.records.get() + 1);
    Ok(crate::grove::field(&record, "id")?.to_string())
}

/// The same echo agent in grove and in tmux, each with its viewer attached.
fn latency(ctx: &Ctx<'_>, repo: &Path, n: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let id = spawn_tty(ctx, repo, ECHO_AGENT)?;
    let mut grove = grove_viewer(ctx, repo, &id)?;
    let tmux = Tmux::new(ctx, "echo");
    tmux.start(ECHO_AGENT)?;
    let mut tmux_viewer = tmux.viewer()?;
    let samples = keystrokes(&mut grove, &mut tmux_viewer, n);
    for viewer in [&mut grove, &mut tmux_viewer] {
        let _ = viewer.child.kill();
        let _ = viewer.child.wait();
    }
    ctx.env.kill_live_agents()?;
    samples
}

/// A tmux server of the benchmark's own.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn new(ctx: &Ctx<'_>, name: &str) -> Tmux {
        Tmux {
            socket: ctx.env.root.join(format!("tmux-{name}")),
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null");
        command
    }

    fn start(&self, script: &str) -> Result<()> {
        let status = self
            .command()
            .args(["new-session", "-d", "-x", "120", "-y", "40", script])
            .stdin(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("tmux new-session failed");
        }
        Ok(())
    }

    fn viewer(&self) -> Result<Viewer> {
        let mut command = self.command();
        command.arg("attach").env("TERM", "xterm-256color");
        Viewer::start(command)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// The agent writes `mb` MB, then leaves a mark; a viewer is attached throughout.
fn writer_script(mb: usize, mark: &Path) -> String {
    format!(
        "sleep 1; head -c {} /dev/zero | tr '\\0' 'a'; touch {}; sleep 600",
        mb * 1_000_000,
        mark.display()
    )
}

fn wait_for_file(path: &Path) -> Result<()> {
    crate::grove::poll_until(
        "the agent's output to be written",
        Duration::from_secs(600),
        Duration::from_millis(5),
        || Ok(path.exists()),
    )
    .map(drop)
}

/// MB/s from the start of the output (1 s after the agent started) to the mark.
fn rate(mb: usize, started: Instant) -> f64 {
    let seconds = started.elapsed().as_secs_f64() - 1.0;
    mb as f64 / seconds.max(0.001)
}

/// Rounds of the output test through grove and through tmux, alternating who goes
/// first, so that a busy moment falls on both alike.
fn throughput(ctx: &Ctx<'_>, repo: &Path, mb: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut grove, mut tmux) = (Vec::new(), Vec::new());
    for round in 0..ctx.runs.max(1) {
        if round % 2 == 0 {
            grove.push(throughput_grove(ctx, repo, mb, round)?);
            tmux.push(throughput_tmux(ctx, mb, round)?);
        } else {
            tmux.push(throughput_tmux(ctx, mb, round)?);
            grove.push(throughput_grove(ctx, repo, mb, round)?);
        }
    }
    Ok((grove, tmux))
}

fn throughput_grove(ctx: &Ctx<'_>, repo: &Path, mb: usize, round: usize) -> Result<f64> {
    let mark = ctx.env.root.join(format!("grove-output-done-{round}"));
    let id = spawn_tty(ctx, repo, &writer_script(mb, &mark))?;
    let started = Instant::now();
    let viewer = grove_viewer(ctx, repo, &id)?;
    let mut child = viewer.drain();
    let written = wait_for_file(&mark);
    let rate = rate(mb, started);
    let _ = child.kill();
    let _ = child.wait();
    ctx.env.kill_live_agents()?;
    written.map(|()| rate)
}

fn throughput_tmux(ctx: &Ctx<'_>, mb: usize, round: usize) -> Result<f64> {
    let mark = ctx.env.root.join(format!("tmux-output-done-{round}"));
    let tmux = Tmux::new(ctx, &format!("output-{round}"));
    tmux.start(&writer_script(mb, &mark))?;
    let started = Instant::now();
    let mut child = tmux.viewer()?.drain();
    let written = wait_for_file(&mark);
    let rate = rate(mb, started);
    let _ = child.kill();
    let _ = child.wait();
    written.map(|()| rate)
}

/// Shim RSS of 20 agents with a terminal, and the daemon's wake-ups while they idle, in
/// three windows one after the other: the daemon's own timers (service levels every
/// 30 s, disk every 60 s) fall in one window at most, so the median counts what the
/// agents cause, and polling for them would show in every window.
fn idle_agents(ctx: &Ctx<'_>, repo: &Path) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut ids = Vec::new();
    for _ in 0..IDLE_AGENTS {
        ids.push(spawn_tty(ctx, repo, "read line")?);
    }
    let mut args = vec!["wait", "--until", "waiting"];
    args.extend(ids.iter().map(String::as_str));
    ctx.env.grove(repo, &args)?;
    let pid = ctx.env.daemon_pid()?;
    // The runtime's blocking threads that served these commands exit after 10 s idle
    // (tokio's keep-alive): their exit is not the agents' doing, so it is let pass.
    std::thread::sleep(BLOCKING_THREADS_KEEP_ALIVE);
    let switches = || grove_sys::proc::context_switches(pid).context("daemon context switches");
    let mut wakeups = Vec::new();
    for _ in 0..IDLE_WINDOWS {
        let before = switches()?;
        std::thread::sleep(IDLE_WINDOW);
        wakeups.push(switches()?.saturating_sub(before) as f64);
    }
    let list = ctx.env.grove_json(repo, &["list"])?;
    let mut rss = Vec::new();
    for agent in list["agents"].as_array().into_iter().flatten() {
        if let Some(shim) = agent["pid"].as_u64() {
            rss.push(super::memory::rss_mib(shim as u32)?);
        }
    }
    ctx.env.kill_live_agents()?;
    Ok((rss, wakeups))
}

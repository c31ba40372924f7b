//! `grove daemon run`: the daemon in this process, logging through tracing.

use crate::connect::READY_LINE;
use crate::log_file::{RotatingFile, KEEP_FILES};
use anyhow::{Context, Result};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use tracing_subscriber::EnvFilter;

pub fn run() -> Result<()> {
    let notify = std::env::var_os("GROVE_NOTIFY_READY").is_some();
    // A daemon that an agent's own `grove` started must not pass that agent's identity
    // on to its git, shims and setup commands: a lost agent's leftovers are found by its
    // token, and would take them along. Still one thread here, before the runtime.
    for var in grove_proto::env::AGENT_IDENTITY_VARS {
        std::env::remove_var(var);
    }
    if !grove_sys::AGENTS_SUPPORTED {
        anyhow::bail!(
            "the grove daemon is not supported on this OS ({}): it runs on Linux only (it \
             needs pidfds, /proc and a child subreaper; see README.md, \"Platform\")",
            grove_sys::OS
        );
    }
    let config = grove_daemon::Config::from_env()?;
    // Refused before the log or anything else is written there.
    grove_daemon::check_socket_dir(&config.dirs)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.dirs.state_dir)
        .with_context(|| format!("creating {}", config.dirs.state_dir.display()))?;
    init_logging(&config.dirs.daemon_log())?;
    grove_sys::memory::share_one_heap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let ready: grove_daemon::Ready = Box::new(move || {
        if notify {
            println!("{READY_LINE}");
            let _ = std::io::stdout().flush();
            detach_stdio();
        }
    });
    let result = runtime.block_on(grove_daemon::run(config, shutdown_signal(), ready));
    if let Err(e) = &result {
        tracing::error!(error = %e, "daemon failed");
    }
    // A blocking task still running (a git job, a deletion) would keep the process,
    // and so its instance lock, for as long as it takes: what is cut short here is
    // picked up by the next start.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    Ok(result?)
}

/// Logs to `path`, rotated by size (`GROVE_LOG_MAX_BYTES`, default 10 MiB; three files).
fn init_logging(path: &std::path::Path) -> Result<()> {
    let file = RotatingFile::open(path, RotatingFile::max_bytes_from_env(), KEEP_FILES)
        .with_context(|| format!("opening the daemon log {}", path.display()))?;
    let filter = EnvFilter::try_from_env("GROVE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file));
    match log_format()? {
        LogFormat::Text => builder.init(),
        // One object per line, with the request and agent spans the line was logged in.
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
    Ok(())
}

enum LogFormat {
    Text,
    Json,
}

/// `GROVE_LOG_FORMAT`: `text` (the default) or `json`.
fn log_format() -> Result<LogFormat> {
    match std::env::var("GROVE_LOG_FORMAT").as_deref() {
        Err(_) | Ok("") | Ok("text") => Ok(LogFormat::Text),
        Ok("json") => Ok(LogFormat::Json),
        Ok(other) => anyhow::bail!(
            "GROVE_LOG_FORMAT={other:?} is not a log format; use `text` (the default) or `json`"
        ),
    }
}

/// After start-up the daemon owes the starting client nothing: point stdio at /dev/null
/// so that a closed pipe never bites it.
fn detach_stdio() {
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
}

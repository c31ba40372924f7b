//! Notifications (`[notify]`): a task on the event bus that runs the user's command, and
//! sends a desktop notification where a session bus exists, when agents start waiting
//! for input, exit or fail. Events within `window` of the first are told in one run.

pub mod config;

use crate::events::{Event, EventBus};
pub use config::NotifyConfig;
use grove_proto::types::{AgentRecord, Outcome};
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// Longest a notification command may run before it is killed: a hung one must not
/// pile up behind the next.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// One agent's change, as the user is told it.
#[derive(Debug, Clone)]
struct Notice {
    id: String,
    name: Option<String>,
    /// `waiting`, `exited` or `failed`.
    event: &'static str,
    status: String,
    /// What it asks, when it waits on a question (`grove ask`).
    question: Option<String>,
}

pub fn start(config: NotifyConfig, events: &EventBus, mut stopped: watch::Receiver<bool>) {
    let mut rx = events.subscribe();
    tokio::spawn(async move {
        let mut batch: Vec<Notice> = Vec::new();
        let mut deadline: Option<Instant> = None;
        loop {
            let flush_at = deadline;
            tokio::select! {
                event = rx.recv() => match event {
                    Ok(event) => {
                        if let Some(notice) = notice(&event).filter(|n| config.wants(n.event)) {
                            deadline.get_or_insert_with(|| Instant::now() + config.window);
                            batch.push(notice);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "notifications fell behind the event bus; some were not sent");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = sleep_until(flush_at), if flush_at.is_some() => {
                    deadline = None;
                    tell(&config, std::mem::take(&mut batch));
                }
                _ = stopped.wait_for(|stop| *stop) => break,
            }
        }
        if !batch.is_empty() {
            tell(&config, batch);
        }
    });
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// The agent event `event` stands for, if it is one a user can be told about.
fn notice(event: &Event) -> Option<Notice> {
    let kind = match event.method {
        "agent.waiting" => "waiting",
        "agent.exited" => "exited",
        _ => return None,
    };
    let record: AgentRecord = serde_json::from_value(event.params.clone()).ok()?;
    let event = match (kind, record.outcome) {
        ("exited", Some(Outcome::Succeeded)) => "exited",
        ("exited", _) => "failed",
        (kind, _) => kind,
    };
    Some(Notice {
        status: record.status_text(),
        question: record.question.map(|q| q.text),
        id: record.id,
        name: record.name,
        event,
    })
}

/// Runs the command (and the desktop notification) once for the whole batch.
fn tell(config: &NotifyConfig, batch: Vec<Notice>) {
    let Some(first) = batch.first() else {
        return;
    };
    let summary = summary(&batch);
    let mut kinds: Vec<&str> = batch.iter().map(|n| n.event).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let ids: Vec<&str> = batch.iter().map(|n| n.id.as_str()).collect();
    let env = vec![
        ("GROVE_AGENT_ID", first.id.clone()),
        ("GROVE_AGENT_NAME", first.name.clone().unwrap_or_default()),
        ("GROVE_EVENT", kinds.join(",")),
        ("GROVE_STATUS", first.status.clone()),
        ("GROVE_EVENT_COUNT", batch.len().to_string()),
        ("GROVE_AGENT_IDS", ids.join(" ")),
        ("GROVE_SUMMARY", summary.clone()),
        ("GROVE_QUESTION", first.question.clone().unwrap_or_default()),
    ];
    if let Some(command) = &config.command {
        run("notify command", command, &env);
    }
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|v| !v.is_empty());
    if config.desktop && bus {
        let argv = vec!["notify-send".to_string(), "grove".to_string(), summary];
        run("notify-send", &argv, &[]);
    }
}

/// "3fa1c2d0 (docs) exited", or "5 agents: 3 exited, 2 failed".
fn summary(batch: &[Notice]) -> String {
    if let [one] = batch {
        let name = one
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        if let Some(question) = &one.question {
            return format!("agent {}{name} asks: {question}", one.id);
        }
        return format!("agent {}{name} {}: {}", one.id, one.event, one.status);
    }
    let parts: Vec<String> = config::EVENTS
        .iter()
        .map(|kind| (kind, batch.iter().filter(|n| n.event == *kind).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    format!("{} agents: {}", batch.len(), parts.join(", "))
}

/// Starts `argv` with `env` added, in the background, bounded by [`COMMAND_LIMIT`];
/// a failure is logged, never fatal.
fn run(what: &'static str, argv: &[String], env: &[(&str, String)]) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::warn!(program = %program, error = %e, "cannot run the {what}");
            return;
        }
    };
    // Until it is reaped by the wait below, its pid cannot be anyone else's: safe to kill.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    tokio::spawn(async move {
        let mut waiting = tokio::task::spawn_blocking(move || child.wait());
        match tokio::time::timeout(COMMAND_LIMIT, &mut waiting).await {
            Ok(Ok(Ok(status))) if !status.success() => {
                tracing::warn!(%status, "the {what} failed")
            }
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "cannot wait for the {what}"),
            Ok(_) => {}
            Err(_) => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = waiting.await;
                tracing::warn!("the {what} ran over {COMMAND_LIMIT:?} and was killed");
            }
        }
    });
}

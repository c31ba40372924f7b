//! `wait_agents` for clients that give up on a request after a fixed time (the
//! TypeScript SDK: 60 s). It polls instead of blocking in `agent.wait`, returns when
//! `timeout_s` is up with what has finished and what still runs, and sends progress
//! notifications meanwhile, which a client may take as a sign of life.

use super::{args, blocking, rpc, Answer};
use crate::connect::{connect, dirs};
use grove_proto::types::AgentStatus;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Under the 60 s request timeout of stock MCP clients, with room for the answer: also
/// the most a call waits, so that a longer `timeout_s` never outlives the client's
/// request (the TypeScript SDK failed a 120 s wait at 60 s); the caller calls again.
const DEFAULT_TIMEOUT_S: f64 = 50.0;
const POLL: Duration = Duration::from_millis(500);
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

pub async fn run(r: args::Wait, context: RequestContext<RoleServer>) -> Answer {
    let any = match r.mode.as_deref() {
        None | Some("all") => false,
        Some("any") => true,
        Some(other) => {
            return Err(format!(
                "wait_agents: mode `{other}` is not one of \"all\", \"any\""
            ))
        }
    };
    let until_waiting = match r.until.as_deref() {
        None | Some("finished") => false,
        Some("waiting") => true,
        Some(other) => {
            return Err(format!(
                "wait_agents: until `{other}` is not one of \"finished\", \"waiting\""
            ))
        }
    };
    if r.ids.is_empty() {
        return Err("wait_agents: ids is empty: give the ids of the agents to wait for".into());
    }
    let timeout_s = r.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
    if !timeout_s.is_finite() || timeout_s < 0.0 {
        return Err(format!(
            "wait_agents: timeout_s {timeout_s} is not a number of seconds >= 0"
        ));
    }
    let deadline = Instant::now() + longest_wait(timeout_s);
    // Prefixes become full ids once, so that an unknown id fails at once.
    let ids = statuses(r.ids).await?;
    let token = context.meta.get_progress_token();
    let started = Instant::now();
    let mut last_progress: Option<Instant> = None;
    let mut current = ids;
    let arrived = |seen: &Seen| seen.status.is_final() || (until_waiting && seen.waiting);
    loop {
        let finished: Vec<&String> = current
            .iter()
            .filter(|seen| arrived(seen))
            .map(|seen| &seen.id)
            .collect();
        let done = if any {
            !finished.is_empty()
        } else {
            finished.len() == current.len()
        };
        if done || Instant::now() >= deadline || context.ct.is_cancelled() {
            return result(&current, arrived, until_waiting, done).await;
        }
        if let Some(token) = &token {
            if last_progress.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
                last_progress = Some(Instant::now());
                let message = format!(
                    "{} of {} agents finished; waiting for {}",
                    finished.len(),
                    current.len(),
                    current
                        .iter()
                        .filter(|seen| !arrived(seen))
                        .map(|seen| seen.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                // The elapsed seconds: progress must grow with every notification.
                let progress = ProgressNotificationParam::new(
                    token.clone(),
                    started.elapsed().as_secs_f64().floor(),
                )
                .with_message(message);
                // A client that went away ends the wait through the cancellation token.
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = context.ct.cancelled() => {}
        }
        current = statuses(current.into_iter().map(|seen| seen.id).collect()).await?;
    }
}

/// How long one call waits for `timeout_s` (a number of seconds >= 0).
fn longest_wait(timeout_s: f64) -> Duration {
    Duration::from_secs_f64(timeout_s.min(DEFAULT_TIMEOUT_S))
}

/// An agent as the wait last saw it.
#[derive(serde::Deserialize)]
struct Seen {
    id: String,
    status: AgentStatus,
    /// Running and waiting for input (its terminal waits, or it asks a question).
    waiting: bool,
}

/// Each agent's full id and status, over one connection.
async fn statuses(ids: Vec<String>) -> Result<Vec<Seen>, String> {
    let value = blocking(move || {
        let mut client = connect(&dirs()?)?;
        let mut out = Vec::new();
        for id in ids {
            let response = client.call_raw("agent.get", json!({ "id": id }))?;
            if let Some(error) = response.error {
                anyhow::bail!("{} (code {})", error.message, error.code);
            }
            let record = response.result.unwrap_or(Value::Null);
            let waiting = record["status"] == "running" && record["activity"] == "waiting";
            out.push(json!({ "id": record["id"], "status": record["status"], "waiting": waiting }));
        }
        Ok(Value::Array(out))
    })
    .await?;
    serde_json::from_value(value).map_err(|e| format!("grove: an unexpected agent record: {e}"))
}

async fn result(
    current: &[Seen],
    arrived: impl Fn(&Seen) -> bool,
    until_waiting: bool,
    complete: bool,
) -> Answer {
    let finished: Vec<&String> = current
        .iter()
        .filter(|seen| arrived(seen))
        .map(|seen| &seen.id)
        .collect();
    let still_running: Vec<&String> = current
        .iter()
        .filter(|seen| !arrived(seen))
        .map(|seen| &seen.id)
        .collect();
    let agents = if finished.is_empty() {
        json!([])
    } else {
        // Returns at once: every one of them has finished (or waits, when asked).
        let until = if until_waiting { "waiting" } else { "finished" };
        let answer = rpc(
            "agent.wait",
            // Bounded: an agent that stopped waiting since the poll is given as it is.
            json!({ "ids": finished, "mode": "all", "until": until, "timeout_ms": 2000 }),
        )
        .await?;
        answer["agents"].clone()
    };
    Ok(json!({
        "agents": agents,
        "still_running": still_running,
        "complete": complete,
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn no_call_waits_past_a_stock_clients_request_timeout() {
        assert_eq!(super::longest_wait(0.5), Duration::from_millis(500));
        assert_eq!(super::longest_wait(120.0), Duration::from_secs(50));
        assert!(super::longest_wait(1e12) < Duration::from_secs(60));
    }
}

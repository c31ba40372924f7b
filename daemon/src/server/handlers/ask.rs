//! `agent.ask`: inside an agent, a question recorded with the agent and an answer
//! waited for (`grove ask`). A client that lost its connection asks again with the same
//! `ask_id` and finds the same question, or its answer.

use super::super::connection::Conn;
use super::super::Ctx;
use super::authority::acting_agent;
use crate::core::Asked;
use crate::Error;
use grove_proto::methods::{AskParams, AskResult};
use grove_proto::now_ms;
use grove_proto::types::Question;
use std::time::Duration;

const MAX_QUESTION: usize = 64 * 1024;
const MAX_CHOICES: usize = 64;
const MAX_ASK_ID: usize = 128;

pub async fn handle(ctx: &Ctx, conn: &Conn, params: AskParams) -> Result<AskResult, Error> {
    let me = acting_agent(ctx, conn, params.token.as_deref())
        .await?
        .ok_or_else(|| {
            Error::BadInput(
                "only an agent asks: run `grove ask` inside one (this connection is from \
                 outside every agent and presents no GROVE_TOKEN)"
                    .into(),
            )
        })?;
    let question = question(params)?;
    // Stored with the agent's record, and with its answer: counted twice against the
    // agent's tree (`tree_max_db`), before anything of it is.
    let bytes = 2 * crate::sessions::json_bytes(&question);
    let tree = ctx.state.tree_db();
    tree.charge_loaded(&me.root, &me.id, bytes).await?;
    let asked = ctx.core.ask_question(&me.id, question).await;
    if asked.is_err() {
        tree.refund(&me.root, bytes);
    }
    let asked = asked?;
    let (question, answer) = match asked {
        Asked::Answered(answered) => return Ok(answered_now(me.id, answered)),
        Asked::TimedOut => return Ok(timed_out(me.id)),
        Asked::Waiting { question, answer } => (question, answer),
    };
    let left = question
        .expires_at_ms
        .map(|at| Duration::from_millis(at.saturating_sub(now_ms())));
    // `None`: the deadline came first.
    let answered = match left {
        Some(left) => tokio::time::timeout(left, answer).await.ok(),
        None => Some(answer.await),
    };
    let expired = question.expires_at_ms.is_some_and(|at| at <= now_ms());
    match answered {
        Some(Ok(answered)) => Ok(answered_now(me.id, answered)),
        // A daemon that stops drops every question's waiters: no answer then, so that
        // the connection closes unanswered and the client asks the next daemon, which
        // has the question from the database.
        Some(Err(_)) if *ctx.stop.borrow() => std::future::pending().await,
        // The core's timer withdrew it (as this wait ended, or first).
        None | Some(Err(_)) if expired => {
            ctx.core.unask(&me.id, &question.id).await;
            Ok(timed_out(me.id))
        }
        None | Some(Err(_)) => Err(Error::InvalidState(format!(
            "agent {}'s question went unanswered: the agent ended or asked another",
            me.id
        ))),
    }
}

fn timed_out(id: String) -> AskResult {
    AskResult {
        id,
        answered: None,
        timed_out: true,
    }
}

fn answered_now(id: String, answered: grove_proto::types::Answered) -> AskResult {
    AskResult {
        id,
        answered: Some(answered),
        timed_out: false,
    }
}

fn question(params: AskParams) -> Result<Question, Error> {
    if params.text.trim().is_empty() {
        return Err(Error::BadInput(
            "the question is empty; say what the agent needs to know".into(),
        ));
    }
    if params.text.len() > MAX_QUESTION {
        return Err(Error::BadInput(format!(
            "the question is {} bytes; keep it under {MAX_QUESTION}",
            params.text.len()
        )));
    }
    check_choices(&params.choices)?;
    let id = match params.ask_id {
        Some(id) if id.is_empty() || id.len() > MAX_ASK_ID => {
            return Err(Error::BadInput(format!(
                "`ask_id` is {} bytes; send 1 to {MAX_ASK_ID} bytes, new for each question",
                id.len()
            )))
        }
        Some(id) => id,
        None => grove_proto::retry::new_idempotency_key(),
    };
    let asked_at_ms = now_ms();
    Ok(Question {
        id,
        text: params.text,
        choices: params.choices,
        asked_at_ms,
        expires_at_ms: params.timeout_ms.map(|t| asked_at_ms.saturating_add(t)),
    })
}

fn check_choices(choices: &[String]) -> Result<(), Error> {
    if choices.len() > MAX_CHOICES {
        return Err(Error::BadInput(format!(
            "{} choices; give at most {MAX_CHOICES}",
            choices.len()
        )));
    }
    if choices.iter().any(|c| c.trim().is_empty()) {
        return Err(Error::BadInput(
            "a choice is empty; give each choice a word (--choices yes,no)".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = choices.iter().find(|c| !seen.insert(c.as_str())) {
        return Err(Error::BadInput(format!(
            "the choice `{twice}` is given twice; give each once"
        )));
    }
    Ok(())
}

//! An agent's question (`grove ask`): kept in its record (so in its database row, and
//! across restarts) while it waits; answered by the user or by the agent's parent,
//! never by the agent itself or another agent. The answer is stored first as an
//! ordinary update of the asker's session (channel [`DECISIONS`], by the one who
//! answered), then handed to the waiting asks.

use super::Core;
use crate::db::agents::AgentRow;
use crate::error::Error;
use grove_proto::now_ms;
use grove_proto::types::{Activity, Answered, Question};
use grove_state::{ChannelSpec, Reducer, Schema};
use tokio::sync::oneshot;

/// The channel of a session where every answer to one of its agents' questions goes
/// (reducer `append`): the history then shows who decided what.
pub(super) const DECISIONS: &str = "decisions";

/// Longest answer taken: a decision, not a document.
const MAX_ANSWER: usize = 64 * 1024;

/// What an ask gets from the core.
pub enum Asked {
    /// The question was answered already (the ask is a client's again, after a lost
    /// connection).
    Answered(Answered),
    /// Its deadline passed and it was withdrawn (the ask is a client's again, after a
    /// lost connection).
    TimedOut,
    /// The question as stored (the first ask's deadline counts) and the answer to come;
    /// the sender goes when the question does (the agent ended, or asked another).
    Waiting {
        question: Question,
        answer: oneshot::Receiver<Answered>,
    },
}

/// A row read at start: a question stored with a live agent still waits (activity is
/// not stored).
pub(super) fn still_asking(mut row: AgentRow) -> AgentRow {
    if row.record.question.is_some() {
        if row.record.status.is_running() {
            row.record.activity = Some(Activity::Waiting);
        } else {
            row.record.question = None;
        }
    }
    row
}

impl Core {
    pub(super) async fn ask(&mut self, id: &str, question: Question) -> Result<Asked, Error> {
        let row = self
            .agents
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("agent {id} vanished")))?;
        if !row.record.status.is_running() {
            return Err(Error::InvalidState(format!(
                "agent {id} is {}: only a running agent asks",
                row.record.status_text()
            )));
        }
        if let Some(answered) = row.record.answer.as_ref() {
            if answered.question_id == question.id {
                return Ok(Asked::Answered(answered.clone()));
            }
        }
        if self.withdrawn.get(id) == Some(&question.id) {
            return Ok(Asked::TimedOut);
        }
        let (tx, answer) = oneshot::channel();
        if let Some(stored) = row.record.question.clone().filter(|q| q.id == question.id) {
            self.askers.entry(id.to_string()).or_default().push(tx);
            return Ok(Asked::Waiting {
                question: stored,
                answer,
            });
        }
        let session = row.record.session.clone();
        self.decisions_channel(&session).await?;
        // Another question replaces the one before: whoever waited on that one (a
        // `grove ask` killed meanwhile) hears that it went.
        self.askers.remove(id);
        let Some(row) = self.agents.get_mut(id) else {
            return Err(Error::NotFound(format!("agent {id} vanished")));
        };
        row.record.question = Some(question.clone());
        row.record.activity = Some(Activity::Waiting);
        let record = row.record.clone();
        self.askers.entry(id.to_string()).or_default().push(tx);
        // The question stands whether or not its record is saved yet (a failed save is
        // retried): the asker waits for an answer either way.
        self.save(id).await;
        self.expire_later(id, &question);
        tracing::info!(agent = %id, question = %question.id, "agent asks");
        self.publish("agent.waiting", &record);
        Ok(Asked::Waiting { question, answer })
    }

    pub(super) async fn answer(
        &mut self,
        target: &str,
        by: Option<String>,
        text: String,
    ) -> Result<Answered, Error> {
        let row = self.resolve_for(target, by.as_deref())?;
        let (id, session) = (row.record.id.clone(), row.record.session.clone());
        if let Some(me) = &by {
            may_answer(me, &row.record)?;
        }
        let Some(question) = row.record.question.clone() else {
            return Err(Error::InvalidState(format!(
                "agent {id} does not ask anything now (it is {}); nothing was answered",
                row.record.status_text()
            )));
        };
        if question.expires_at_ms.is_some_and(|at| at <= now_ms()) {
            self.unask(&id, &question.id).await;
            return Err(Error::InvalidState(format!(
                "agent {id} stopped waiting: its question timed out; nothing was answered"
            )));
        }
        check_answer(&question, &text)?;
        let by = by.unwrap_or_else(|| "user".into());
        let checkpoint = self
            .record_decision(&session, &id, &question, &by, &text)
            .await?;
        crate::faults::point("mid_answer");
        let answered = Answered {
            question_id: question.id,
            question: question.text,
            answer: text,
            by,
            at_ms: now_ms(),
            checkpoint,
        };
        let Some(row) = self.agents.get_mut(&id) else {
            return Err(Error::NotFound(format!("agent {id} vanished")));
        };
        row.record.question = None;
        row.record.activity = None;
        row.record.answer = Some(answered.clone());
        let record = row.record.clone();
        // The answer is in the session already and reaches the asker either way; the
        // one who answered hears if the record is not saved yet.
        let saved = self.persist(&id).await;
        tracing::info!(agent = %id, by = %answered.by, checkpoint, "question answered");
        self.publish("agent.answered", &record);
        for asker in self.askers.remove(&id).unwrap_or_default() {
            let _ = asker.send(answered.clone());
        }
        saved.map(|()| answered)
    }

    /// The asker's session gets its [`DECISIONS`] channel (`append`) by a migration the
    /// first time one of its agents asks, so that an answer is an ordinary update. Done
    /// in the core's turn, so that agents asking at once migrate once.
    async fn decisions_channel(&self, session: &str) -> Result<(), Error> {
        let info = self.state.info(session).await?;
        let mut schema = Schema::from_json(&info.schema).map_err(|e| {
            Error::InvalidState(format!(
                "session `{session}` has a schema this grove cannot read ({e})"
            ))
        })?;
        match schema.channel(DECISIONS) {
            Some(spec) if spec.reducer == Reducer::Append => Ok(()),
            Some(spec) => Err(Error::InvalidState(format!(
                "session `{session}` declares `{DECISIONS}` with reducer `{}`; grove appends \
                 every answer to it: declare it `append` (grove session migrate) to ask",
                spec.reducer
            ))),
            None => {
                let spec = ChannelSpec::new(Reducer::Append, None).map_err(Error::BadInput)?;
                schema.channels.insert(DECISIONS.into(), spec);
                self.state
                    .migrate(session, schema, Vec::new(), Default::default())
                    .await?;
                tracing::info!(
                    session,
                    "added the `{DECISIONS}` channel for an agent's question"
                );
                Ok(())
            }
        }
    }

    /// The decision, appended to the asker's session as an update by `by`, once: its
    /// checkpoint is stored with a key of the question and the answer, so that the same
    /// answer given again after a crash between the checkpoint and the record (the
    /// question still shows) finds that checkpoint instead of deciding twice.
    async fn record_decision(
        &self,
        session: &str,
        id: &str,
        question: &Question,
        by: &str,
        answer: &str,
    ) -> Result<u64, Error> {
        let key = format!(
            "decision {id}:{}:{}",
            question.id,
            crate::worktree_setup::trust::sha256_hex(answer)
        );
        if let Some(checkpoint) = self.decided(&key).await? {
            return Ok(checkpoint);
        }
        let mut decision = serde_json::json!({
            "agent": id,
            "question": question.text,
            "answer": answer,
            "by": by,
            "asked_at_ms": question.asked_at_ms,
            "answered_at_ms": now_ms(),
        });
        if !question.choices.is_empty() {
            decision["choices"] = serde_json::json!(question.choices);
        }
        let write = grove_state::Write {
            channel: DECISIONS.into(),
            value: serde_json::Value::Array(vec![decision]),
            base: None,
        };
        self.state
            .update(session, by, vec![write], Some(key), None)
            .await
    }

    /// The checkpoint a decision of this key was stored at, if it was.
    async fn decided(&self, key: &str) -> Result<Option<u64>, Error> {
        let key = key.to_string();
        let found = self
            .db
            .call(move |conn| crate::db::idempotency::find(conn, &key, now_ms()))
            .await?;
        Ok(found.and_then(|(_, answer)| {
            serde_json::from_str::<serde_json::Value>(&answer).ok()?["checkpoint"].as_u64()
        }))
    }

    /// A question with a deadline goes at its deadline even when no ask waits on it
    /// any more (its `grove ask` was killed, or has not asked the new daemon yet).
    pub(super) fn expire_later(&self, id: &str, question: &Question) {
        let Some(at) = question.expires_at_ms else {
            return;
        };
        let left = std::time::Duration::from_millis(at.saturating_sub(now_ms()));
        let (tx, id, question) = (self.tx.clone(), id.to_string(), question.id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(left).await;
            let _ = tx.send(super::Msg::Unask(id, question)).await;
        });
    }

    /// After a restart: the deadlines of the questions read with the table.
    pub(super) fn expire_stored_questions(&self) {
        for row in self.agents.values() {
            if let Some(question) = &row.record.question {
                self.expire_later(&row.record.id, question);
            }
        }
    }

    /// The asker stopped waiting: its question goes, unless another replaced it.
    pub(super) async fn unask(&mut self, id: &str, question: &str) {
        let Some(row) = self.agents.get_mut(id) else {
            return;
        };
        if row
            .record
            .question
            .as_ref()
            .is_none_or(|q| q.id != question)
        {
            return;
        }
        row.record.question = None;
        row.record.activity = None;
        let record = row.record.clone();
        self.askers.remove(id);
        self.withdrawn.insert(id.to_string(), question.to_string());
        self.save(id).await;
        tracing::info!(agent = %id, question, "question dropped: its ask stopped waiting");
        self.publish("agent.working", &record);
    }
}

/// Only the asker's parent answers among agents: not the asker, not a sibling or a
/// grandchild (those do not see it, or are refused here).
fn may_answer(me: &str, asker: &grove_proto::types::AgentRecord) -> Result<(), Error> {
    if asker.id == me {
        return Err(Error::Refused(format!(
            "agent {me} may not answer its own question; its parent or the user answers it"
        )));
    }
    if asker.parent.as_deref() != Some(me) {
        let who = match &asker.parent {
            Some(parent) => format!("its parent, agent {parent},"),
            None => "the user".into(),
        };
        return Err(Error::Refused(format!(
            "agent {me} may not answer agent {}: only {who} or the user answers it",
            asker.id
        )));
    }
    Ok(())
}

fn check_answer(question: &Question, text: &str) -> Result<(), Error> {
    if text.trim().is_empty() {
        return Err(Error::BadInput(
            "the answer is empty; say what the agent should do".into(),
        ));
    }
    if text.len() > MAX_ANSWER {
        return Err(Error::BadInput(format!(
            "the answer is {} bytes; keep it under {MAX_ANSWER}",
            text.len()
        )));
    }
    if !question.choices.is_empty() && !question.choices.iter().any(|c| c == text) {
        return Err(Error::BadInput(format!(
            "`{text}` is not one of the choices the agent gave ({}); answer with one of them",
            question.choices.join(", ")
        )));
    }
    Ok(())
}

//! `grove session migrate`: a session moves to a new schema in one checkpoint (source
//! `migrate`). Channels may be added (with their defaults) and reducers changed where
//! the stored value fits the new one; a channel goes only when named in `drop`. The
//! old schema is kept for the checkpoints before, so history reads as it was written.

use super::session::Session;
use super::store::{self, CheckpointRow, SessionHead};
use super::StateService;
use crate::error::Error;
use grove_agent_shim::now_ms;
use grove_proto::methods::SessionMigrateResult;
use grove_proto::state::CheckpointInfo;
use grove_state::{LastChange, Schema, State};

/// What a migration changes, checked before anything is.
struct Plan {
    state: State,
    added: Vec<String>,
    dropped: Vec<String>,
    changed: Vec<String>,
}

fn plan(session: &Session, new: &Schema, drop: &[String]) -> Result<Plan, Error> {
    let old = &session.schema;
    let name = &session.name;
    for channel in drop {
        if old.channel(channel).is_none() {
            return Err(Error::BadInput(format!(
                "--drop {channel}: session `{name}` has no channel `{channel}` (it has: {})",
                old.channel_names().join(", ")
            )));
        }
        if new.channel(channel).is_some() {
            return Err(Error::BadInput(format!(
                "--drop {channel}: the new schema still declares `{channel}`; drop it from \
                 the schema file or from --drop"
            )));
        }
    }
    let mut state = session.current.clone();
    let mut plan = Plan {
        state: State::new(),
        added: Vec::new(),
        dropped: drop.to_vec(),
        changed: Vec::new(),
    };
    for channel in old.channel_names() {
        if new.channel(&channel).is_none() && !drop.contains(&channel) {
            return Err(Error::BadInput(format!(
                "the new schema leaves out channel `{channel}` of session `{name}`; to drop \
                 it and its value, pass --drop {channel}; nothing was changed"
            )));
        }
    }
    for channel in drop {
        state.remove(channel);
    }
    for (channel, spec) in &new.channels {
        match old.channel(channel) {
            None => {
                state.insert(channel.clone(), spec.initial_value());
                plan.added.push(channel.clone());
            }
            Some(before) if before.reducer != spec.reducer => {
                let held = state.get(channel).cloned().unwrap_or_default();
                if !held.is_null() && !spec.reducer.accepts_default(&held) {
                    return Err(Error::BadInput(format!(
                        "channel `{channel}` holds {}, which reducer `{}` cannot take \
                         (it needs {}); replace its value first with \
                         {{\"__overwrite__\": value}}, or drop it; nothing was changed",
                        grove_state::json_type(&held),
                        spec.reducer,
                        spec.reducer.expected_default()
                    )));
                }
                plan.changed.push(channel.clone());
            }
            Some(_) => {}
        }
    }
    plan.state = state;
    Ok(plan)
}

impl StateService {
    pub(super) async fn migrate(
        &mut self,
        name: &str,
        new: Schema,
        drop: Vec<String>,
    ) -> Result<SessionMigrateResult, Error> {
        self.use_session(name).await?;
        let session = self.session(name)?;
        let plan = plan(session, &new, &drop)?;
        let id = session.head + 1;
        let at_ms = now_ms();
        let mut channels: Vec<String> = plan
            .added
            .iter()
            .chain(&plan.dropped)
            .chain(&plan.changed)
            .cloned()
            .collect();
        channels.sort();
        let mut last_changes = session.last_changes.clone();
        last_changes.retain(|channel, _| !drop.contains(channel));
        for channel in &channels {
            if !drop.contains(channel) {
                let change = LastChange::after(last_changes.get(channel), id, "migrate");
                last_changes.insert(channel.clone(), change);
            }
        }
        let info = CheckpointInfo {
            id,
            parent: (id > 1).then_some(id - 1),
            parent_session: None,
            at_ms,
            writer: "user".into(),
            source: "migrate".into(),
            channels,
            schema_version: new.version,
            code: None,
        };
        let encode = |source| Error::Encode {
            what: "the migrated state",
            source,
        };
        let row = CheckpointRow::new(name, info, &[], Some(&plan.state)).map_err(encode)?;
        let bytes = super::json_bytes(&plan.state);
        let oldest = session.oldest.max(1);
        let head = SessionHead::new(name, id, oldest, Some(at_ms), &last_changes, bytes)
            .map_err(encode)?;
        let (old_json, new_json, version) = (session.schema.to_json(), new.to_json(), new.version);
        self.db
            .call(move |conn| {
                store::commit_migrate(conn, &old_json, &row, &head, &new_json, version)
            })
            .await?;
        if let Some(session) = self.sessions.get_mut(name) {
            session.schema = new;
            session.schema_version = version;
            session.current = plan.state;
            session.head = id;
            session.oldest = oldest;
            session.last_at_ms = Some(at_ms);
            session.last_changes = last_changes;
            session.remeasure();
        }
        Ok(SessionMigrateResult {
            session: name.to_string(),
            checkpoint: id,
            added: plan.added,
            dropped: plan.dropped,
            changed: plan.changed,
        })
    }
}

//! `grove session migrate`: a session moves to a new schema in one checkpoint (source
//! `migrate`). Channels may be added (with their defaults) and reducers changed where
//! the stored value fits the new one; a channel goes only when named in `drop`. A new
//! schema of a higher revision first runs the steps of its chain from the session's
//! revision (state-semantics.md, 36), all of it refused if one step fails. The old
//! schema is kept for the checkpoints before, so history reads as it was written.

use super::session::Session;
use super::store::{self, CheckpointRow, SessionHead};
use super::StateService;
use crate::error::Error;
use grove_proto::methods::SessionMigrateResult;
use grove_proto::now_ms;
use grove_proto::state::CheckpointInfo;
use grove_state::chain::Migration;
use grove_state::{LastChange, Schema, State};
use std::collections::{BTreeMap, HashMap};

/// What a migration changes, checked before anything is.
struct Plan {
    state: State,
    added: Vec<String>,
    dropped: Vec<String>,
    changed: Vec<String>,
    converted: Vec<String>,
    /// The chain's steps it takes (their renames and drops are in `renamed`/`dropped`).
    steps: Vec<Migration>,
}

/// The flags fit `old`, the session's schema as the new one's chain leaves it (its
/// renames and drops made): what is dropped or renamed is there, what the new schema
/// leaves out is named.
fn check_flags(
    name: &str,
    old: &Schema,
    new: &Schema,
    drop: &[String],
    renames: &BTreeMap<String, String>,
) -> Result<(), Error> {
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
    check_renames(name, old, new, drop, renames)?;
    for channel in old.channel_names() {
        if new.channel(&channel).is_none()
            && !drop.contains(&channel)
            && !renames.contains_key(&channel)
        {
            return Err(Error::BadInput(format!(
                "the new schema leaves out channel `{channel}` of session `{name}`; to drop \
                 it and its value, pass --drop {channel} (or --rename {channel}=NEW to keep \
                 it under another name, or declare it in a step of [[state.migrations]]); \
                 nothing was changed"
            )));
        }
    }
    Ok(())
}

async fn plan(
    session: &Session,
    new: &Schema,
    drop: &[String],
    renames: &BTreeMap<String, String>,
) -> Result<Plan, Error> {
    let (old, name) = (&session.schema, &session.name);
    let refused = |why: &super::eras::Uncarried| {
        Error::BadInput(format!(
            "cannot migrate session `{name}`: {}; nothing was changed",
            why.describe()
        ))
    };
    let before = super::eras::before_chain(old, new).map_err(|why| refused(&why))?;
    check_flags(name, &before, new, drop, renames)?;
    let step = super::eras::carry(old, new, renames, session.current.clone())
        .await
        .map_err(|why| match why {
            super::eras::Uncarried::Unfit(ref unfit) if unfit.by.is_none() => {
                Error::BadInput(format!(
                    "{}; replace its value first with {{\"__overwrite__\": value}}, or \
                     drop it; nothing was changed",
                    why.describe()
                ))
            }
            why => refused(&why),
        })?;
    let steps = grove_state::chain::steps_between(&new.migrations, old.revision, new.revision)
        .map(<[Migration]>::to_vec)
        .unwrap_or_default();
    let mut dropped: Vec<String> = steps.iter().flat_map(|s| s.drop.clone()).collect();
    dropped.extend(drop.iter().cloned());
    Ok(Plan {
        state: step.state,
        added: step.added,
        dropped,
        changed: step.changed,
        converted: step.converted.into_keys().collect(),
        steps,
    })
}

/// A rename moves a channel of the old schema to a name only the new one declares.
fn check_renames(
    name: &str,
    old: &Schema,
    new: &Schema,
    drop: &[String],
    renames: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let mut targets = std::collections::BTreeSet::new();
    for (from, to) in renames {
        let why = if old.channel(from).is_none() {
            format!("session `{name}` has no channel `{from}`")
        } else if drop.contains(from) {
            format!("`{from}` is also in --drop")
        } else if new.channel(from).is_some() {
            format!("the new schema still declares `{from}`")
        } else if new.channel(to).is_none() {
            format!("the new schema does not declare `{to}`")
        } else if old.channel(to).is_some() {
            format!("session `{name}` already has a channel `{to}`")
        } else if !targets.insert(to) {
            format!("another --rename also names `{to}`")
        } else {
            continue;
        };
        return Err(Error::BadInput(format!(
            "--rename {from}={to}: {why}; nothing was changed"
        )));
    }
    Ok(())
}

/// The channels the migration's checkpoint `id` touches, and each channel's last
/// change after it: a renamed channel keeps its own under its new name.
fn touched(
    plan: &Plan,
    renames: &BTreeMap<String, String>,
    before: &HashMap<String, LastChange>,
    id: u64,
) -> (Vec<String>, HashMap<String, LastChange>) {
    let mut last_changes = before.clone();
    let mut moved = Vec::new();
    for step in &plan.steps {
        for (from, to) in &step.rename {
            if let Some(change) = last_changes.remove(from) {
                last_changes.insert(to.clone(), change);
            }
            moved.extend([from.clone(), to.clone()]);
        }
    }
    let mut channels: Vec<String> = plan
        .added
        .iter()
        .chain(&moved)
        .chain(&plan.dropped)
        .chain(&plan.changed)
        .chain(&plan.converted)
        .chain(renames.keys())
        .chain(renames.values())
        .cloned()
        .collect();
    channels.sort();
    channels.dedup();
    last_changes.retain(|channel, _| !plan.dropped.contains(channel));
    for (from, to) in renames {
        if let Some(change) = last_changes.remove(from) {
            last_changes.insert(to.clone(), change);
        }
    }
    for channel in &channels {
        // Only what the new state holds: not a channel dropped or renamed away.
        if plan.state.contains_key(channel) {
            let change = LastChange::after(last_changes.get(channel), id, "migrate");
            last_changes.insert(channel.clone(), change);
        }
    }
    (channels, last_changes)
}

impl StateService {
    pub(super) async fn migrate(
        &mut self,
        name: &str,
        new: Schema,
        drop: Vec<String>,
        renames: BTreeMap<String, String>,
    ) -> Result<SessionMigrateResult, Error> {
        self.use_session(name).await?;
        let session = self.session(name)?;
        let plan = plan(session, &new, &drop, &renames).await?;
        let session = self.session(name)?;
        let id = session.head + 1;
        let at_ms = now_ms();
        let (channels, last_changes) = touched(&plan, &renames, &session.last_changes, id);
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
        let kept = store::KeptSchema {
            schema: old_json,
            renames: (!renames.is_empty())
                .then(|| serde_json::to_string(&renames))
                .transpose()
                .map_err(encode)?,
        };
        self.db
            .call(move |conn| store::commit_migrate(conn, &kept, &row, &head, &new_json, version))
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
            converted: plan.converted,
            renamed: plan
                .steps
                .iter()
                .flat_map(|step| step.rename.clone())
                .chain(renames)
                .collect(),
        })
    }
}

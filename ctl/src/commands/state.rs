//! `grove state ...`: the shared state of a session. Inside an agent, GROVE_TOKEN says
//! who writes and GROVE_SESSION where; outside, `--session` names the session.

use crate::cli::{SessionArg, StateCommand};
use crate::connect::{connect, dirs};
use crate::exit::UsageError;
use crate::output::{ago, print_json, print_json_or, safe, safe_path, table};
use anyhow::{Context, Result};
use grove_proto::methods::{
    StateCode, StateCodeParams, StateCodeResult, StateCompact, StateCompactParams, StateFork,
    StateForkParams, StateGet, StateGetParams, StateGetResult, StateHistory, StateHistoryParams,
    StateHistoryResult, StatePin, StatePinParams, StateUpdate, StateUpdateParams, StateWatch,
    StateWatchParams,
};
use grove_proto::state::StateWrite;
use grove_proto::Client;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

/// `grove spawn --session NEW --base REF --repo REPO -- COMMAND`: the spawn starts on
/// the commit `state.code` made of the checkpoint's code.
fn spawn_on_code(
    code: &StateCodeResult,
    session: &str,
    command: Vec<String>,
    json: bool,
) -> Result<ExitCode> {
    #[derive(clap::Parser)]
    struct Spawn {
        #[command(flatten)]
        args: crate::cli::SpawnArgs,
    }
    let mut argv: Vec<std::ffi::OsString> = vec!["grove state fork --spawn".into()];
    argv.extend(
        [
            "--session",
            session,
            "--base",
            &code.reference,
            "--no-stdin",
            "--repo",
        ]
        .map(Into::into),
    );
    argv.push(code.repo.clone().into_os_string());
    argv.push("--".into());
    argv.extend(command.into_iter().map(Into::into));
    let parsed = <Spawn as clap::Parser>::try_parse_from(argv)
        .map_err(|e| UsageError(format!("cannot spawn on the checkpoint's code: {e}")))?;
    if !json {
        eprintln!(
            "spawning on {} ({} in {})",
            code.reference,
            &code.commit[..code.commit.len().min(10)],
            code.repo.display()
        );
    }
    crate::commands::spawn::run(parsed.args, json)
}

/// The ref first (what `--base` takes), then where it is and how to start on it.
fn print_code(code: &StateCodeResult) {
    let repo = safe_path(&code.repo);
    println!("{}", safe(&code.reference));
    println!("  checkpoint {} of {}", code.at, safe(&code.session));
    println!(
        "  commit {} (tree {})",
        safe(&code.commit),
        safe(&code.tree)
    );
    println!("  in {repo}");
    if !code.left_out.is_empty() {
        let files: Vec<String> = code.left_out.iter().map(|f| safe(f)).collect();
        println!("  left out (over salvage_max_file): {}", files.join(", "));
    }
    println!(
        "  start an agent on it: grove spawn --repo {repo} --base {} -- COMMAND",
        safe(&code.reference)
    );
}

fn token() -> Option<String> {
    std::env::var("GROVE_TOKEN").ok().filter(|t| !t.is_empty())
}

pub fn run(command: StateCommand, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    match command {
        StateCommand::Update {
            session,
            base,
            file,
            pairs,
        } => update(&mut client, session, base, file.as_deref(), &pairs, json),
        StateCommand::Get {
            session,
            at,
            migrate,
            channel,
        } => {
            let got = read_state(
                &mut client,
                StateGetParams {
                    session: session.session,
                    token: token(),
                    at,
                    migrate,
                    channel,
                    offset: None,
                },
            )?;
            if json {
                print_json(&got)?;
            } else {
                println!("{}", serde_json::to_string_pretty(&got.state)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::History { session, limit } => history(&mut client, session, limit, json),
        StateCommand::Watch { session } => watch(&mut client, session, json),
        StateCommand::Fork {
            from,
            at,
            new_session,
            migrate,
            spawn,
            command,
        } => {
            // The code first: a checkpoint without code refuses before anything is made.
            let code = if spawn {
                Some(client.call::<StateCode>(&StateCodeParams {
                    session: from.clone(),
                    token: token(),
                    at,
                })?)
            } else {
                None
            };
            let info = client.call::<StateFork>(&StateForkParams {
                session: from,
                token: token(),
                at,
                new_session,
                migrate,
            })?;
            if json {
                // With --spawn, the agent's record is the answer.
                if code.is_none() {
                    print_json(&info)?;
                }
            } else {
                println!(
                    "session {} starts from checkpoint {at} of {}",
                    info.name,
                    info.forked_from.clone().unwrap_or_default()
                );
            }
            match code {
                Some(code) => spawn_on_code(&code, &info.name, command, json),
                None => Ok(ExitCode::SUCCESS),
            }
        }
        StateCommand::Pin {
            session,
            at,
            remove,
        } => {
            let session = session
                .session
                .ok_or_else(|| UsageError("say which session: --session NAME".into()))?;
            let done = client.call::<StatePin>(&StatePinParams {
                session,
                at,
                unpin: remove,
            })?;
            if json {
                print_json(&done)?;
            } else {
                let verb = if remove { "unpinned" } else { "pinned" };
                let all: Vec<String> = done.pinned.iter().map(u64::to_string).collect();
                println!(
                    "{verb} checkpoint {at} of {}; pinned now: {}",
                    done.session,
                    if all.is_empty() {
                        "none".into()
                    } else {
                        all.join(", ")
                    }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Code { session, at } => {
            let code = client.call::<StateCode>(&StateCodeParams {
                session: session.session,
                token: token(),
                at,
            })?;
            if json {
                print_json(&code)?;
            } else {
                print_code(&code);
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Compact { session, keep } => {
            let session = session
                .session
                .ok_or_else(|| UsageError("say which session: --session NAME".into()))?;
            let done = client.call::<StateCompact>(&StateCompactParams { session, keep })?;
            if json {
                print_json(&done)?;
            } else {
                println!(
                    "dropped {} checkpoints of {}; the oldest readable is {}",
                    done.dropped, done.session, done.oldest
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn update(
    client: &mut Client,
    session: SessionArg,
    base: Option<u64>,
    file: Option<&Path>,
    pairs: &[String],
    json: bool,
) -> Result<ExitCode> {
    let batches = match file {
        Some(path) => batches_from_file(path, base)?,
        None => vec![batch_from_pairs(pairs, base)?],
    };
    let mut results = Vec::new();
    for writes in batches {
        let done = client.call::<StateUpdate>(&StateUpdateParams {
            session: session.session.clone(),
            token: token(),
            writes,
        })?;
        if !json {
            println!("checkpoint {}", done.checkpoint);
        }
        results.push(done);
    }
    if json {
        print_json(&results)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_value(channel: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| {
        UsageError(format!(
            "the value for channel `{channel}` is not JSON ({e}): write strings with quotes, \
             e.g. '\"text\"', lists as '[\"a\",\"b\"]'"
        ))
        .into()
    })
}

fn batch_from_pairs(pairs: &[String], base: Option<u64>) -> Result<Vec<StateWrite>> {
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(UsageError(
            "give CHANNEL JSON pairs, e.g. `grove state update tests_passed 1`, or --file F".into(),
        )
        .into());
    }
    pairs
        .chunks(2)
        .map(|pair| {
            Ok(StateWrite {
                channel: pair[0].clone(),
                value: parse_value(&pair[0], &pair[1])?,
                base,
            })
        })
        .collect()
}

/// One JSON document, or NDJSON with one batch per line. A batch is an object of
/// `channel: value`, or `{"writes": [{"channel", "value", "base"?}, ...]}`.
fn batches_from_file(path: &Path, base: Option<u64>) -> Result<Vec<Vec<StateWrite>>> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    let documents: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(one) => {
            no_repeated_keys(&text).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
            vec![one]
        }
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                let at = format!("{}:{}", path.display(), n + 1);
                let doc = serde_json::from_str(line)
                    .map_err(|e| UsageError(format!("{at}: not JSON: {e}")))?;
                no_repeated_keys(line).map_err(|e| UsageError(format!("{at}: {e}")))?;
                Ok(doc)
            })
            .collect::<Result<_>>()?,
    };
    documents
        .into_iter()
        .map(|doc| batch_from_document(doc, base, path))
        .collect()
}

fn batch_from_document(doc: Value, base: Option<u64>, path: &Path) -> Result<Vec<StateWrite>> {
    let Value::Object(map) = doc else {
        return Err(UsageError(format!(
            "{}: each batch must be a JSON object",
            path.display()
        ))
        .into());
    };
    if let Some(writes) = map.get("writes") {
        let mut writes: Vec<StateWrite> = serde_json::from_value(writes.clone())
            .map_err(|e| UsageError(format!("{}: bad `writes`: {e}", path.display())))?;
        for write in &mut writes {
            write.base = write.base.or(base);
        }
        return Ok(writes);
    }
    Ok(map
        .into_iter()
        .map(|(channel, value)| StateWrite {
            channel,
            value,
            base,
        })
        .collect())
}

/// The whole state (or channel), however many pages it takes: every page is read at
/// the checkpoint of the first, so that they are of one state.
pub fn read_state(client: &mut Client, mut params: StateGetParams) -> Result<StateGetResult> {
    let mut got = client.call::<StateGet>(&params)?;
    let Some(mut page) = got.page.take() else {
        return Ok(got);
    };
    let mut text = String::with_capacity(page.bytes as usize);
    params.at = Some(got.checkpoint);
    loop {
        text.push_str(&page.text);
        let Some(next) = page.next else { break };
        params.offset = Some(next);
        page = client
            .call::<StateGet>(&params)?
            .page
            .context("the daemon stopped paging the state midway")?;
    }
    got.state = serde_json::from_str(&text).context("the state's pages do not join into JSON")?;
    Ok(got)
}

/// The newest `limit` checkpoints, however many pages they take.
fn read_history(
    client: &mut Client,
    session: Option<String>,
    limit: u32,
) -> Result<StateHistoryResult> {
    let mut params = StateHistoryParams {
        session,
        token: token(),
        limit: Some(limit),
        before: None,
    };
    let mut all = client.call::<StateHistory>(&params)?;
    while let Some(before) = all.next.take() {
        let wanted = limit.saturating_sub(all.checkpoints.len() as u32);
        if wanted == 0 {
            break;
        }
        (params.before, params.limit) = (Some(before), Some(wanted));
        let mut page = client.call::<StateHistory>(&params)?;
        all.checkpoints.append(&mut page.checkpoints);
        all.next = page.next;
    }
    Ok(all)
}

fn history(client: &mut Client, session: SessionArg, limit: u32, json: bool) -> Result<ExitCode> {
    let history = read_history(client, session.session, limit)?;
    print_json_or(json, &history, |history| {
        let rows = history
            .checkpoints
            .iter()
            .map(|c| {
                vec![
                    c.id.to_string(),
                    ago(c.at_ms),
                    safe(&c.writer),
                    safe(&match (&c.parent_session, c.parent) {
                        (Some(from), Some(at)) => format!("{} from {from}@{at}", c.source),
                        _ => c.source.clone(),
                    }),
                    safe(&c.channels.join(", ")),
                    c.code.as_ref().map_or_else(|| "-".into(), code_cell),
                ]
            })
            .collect();
        println!(
            "{}",
            table(
                &["CHECKPOINT", "WHEN", "WRITER", "SOURCE", "CHANNELS", "CODE"],
                rows
            )
        );
    })
}

/// The code of a checkpoint, short: the branch tip, and the worktree's tree.
fn code_cell(code: &grove_proto::state::CodeRef) -> String {
    let short = |oid: &str| oid.chars().take(10).collect::<String>();
    match &code.commit {
        Some(commit) => format!("{} tree {}", short(commit), short(&code.tree)),
        None => format!("tree {}", short(&code.tree)),
    }
}

fn watch(client: &mut Client, session: SessionArg, json: bool) -> Result<ExitCode> {
    let started = client.call::<StateWatch>(&StateWatchParams {
        session: session.session,
        token: token(),
    })?;
    if json {
        println!("{}", serde_json::to_string(&started)?);
    } else {
        eprintln!(
            "watching session {} from checkpoint {} (Ctrl-C to stop)",
            started.session, started.checkpoint
        );
    }
    let mut seen = started.checkpoint;
    loop {
        let mut note = client.next_notification()?;
        if note.method == "state.lagged" {
            // After a reconnect the daemon cannot know what this watch missed; the new
            // head against the last checkpoint seen here can.
            if let Some(head) = note.params["resubscribed"]["checkpoint"].as_u64() {
                note.params["missed"] = head.saturating_sub(seen).into();
                seen = seen.max(head);
            }
        } else if let Some(checkpoint) = note.params["checkpoint"].as_u64() {
            seen = seen.max(checkpoint);
        }
        if json {
            println!("{}", serde_json::to_string(&note)?);
        } else if note.method == "state.lagged" {
            println!("{}", lagged_line(&note.params));
        } else {
            let channels: Vec<&str> = note.params["channels"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            println!(
                "checkpoint {} by {}: {}",
                note.params["checkpoint"],
                safe(note.params["writer"].as_str().unwrap_or("?")),
                safe(&channels.join(", "))
            );
        }
    }
}

/// What `state watch` says when it missed updates: how many, as a number.
fn lagged_line(params: &Value) -> String {
    let why = if params["reconnected"] == true {
        "the daemon restarted; "
    } else {
        ""
    };
    let missed = match params["missed"].as_u64() {
        Some(1) => "1 update".to_string(),
        Some(n) => format!("{n} updates"),
        None => "some updates".to_string(),
    };
    format!("({why}missed {missed}; `grove state get` shows the current state)")
}

/// Refuses JSON with a key twice in one object: parsed as a map, all but the last would
/// be dropped without a word (a batch's channel written twice, say).
fn no_repeated_keys(text: &str) -> std::result::Result<(), String> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    use std::collections::HashSet;
    struct Check;
    impl<'de> serde::de::DeserializeSeed<'de> for Check {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_any(Check)
        }
    }
    impl<'de> Visitor<'de> for Check {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            while seq.next_element_seed(Check)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            let mut seen = HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!(
                        "key `{key}` appears twice in one object; write each channel once \
                         per batch (repeated writes go in separate batches, one per line)"
                    )));
                }
                map.next_value_seed(Check)?;
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Check, &mut de).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::no_repeated_keys;

    #[test]
    fn a_repeated_key_at_any_depth_is_found() {
        assert!(no_repeated_keys(r#"{"a": 1, "b": {"c": [1, {"d": 2}]}}"#).is_ok());
        let e = no_repeated_keys(r#"{"a": 1, "a": 2}"#).expect_err("twice");
        assert!(e.contains("key `a` appears twice"), "{e}");
        assert!(no_repeated_keys(r#"[{"n": {"x": 1, "x": 1}}]"#).is_err());
    }
}

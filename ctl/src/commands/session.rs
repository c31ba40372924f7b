use crate::cli::SessionCommand;
use crate::connect::{connect, dirs};
use crate::output::{ago, bytes, paint, print_json, safe, status_word_tone, table};
use anyhow::Result;
use grove_proto::methods::{
    SessionList, SessionListParams, SessionListResult, SessionMigrate, SessionMigrateParams,
    SessionRm, SessionRmParams, SessionShow, SessionShowParams,
};
use grove_proto::state::SchemaText;
use grove_proto::state::SessionInfo;
use std::process::ExitCode;

pub fn run(command: SessionCommand, json: bool) -> Result<ExitCode> {
    let mut client = connect(&dirs()?)?;
    match command {
        SessionCommand::List { all } => {
            let mut list = read_all(&mut client)?;
            if !all {
                list.sessions.retain(|s| !automatic(s));
            }
            if json {
                print_json(&list)?;
            } else if list.sessions.is_empty() {
                println!(
                    "no sessions yet{}; `grove spawn --session NAME -- ...` starts one",
                    if all {
                        ""
                    } else {
                        " (--all shows the agents' own)"
                    }
                );
            } else {
                let rows = list.sessions.iter().map(row).collect();
                println!(
                    "{}",
                    table(
                        &[
                            "SESSION",
                            "AGENTS",
                            "CHANNELS",
                            "CHECKPOINTS",
                            "LAST UPDATE",
                            "SIZE"
                        ],
                        rows
                    )
                );
            }
        }
        SessionCommand::Migrate {
            name,
            schema,
            drop,
            rename,
        } => {
            let rename = renames(&rename)?;
            let text = std::fs::read_to_string(&schema).map_err(|e| {
                crate::exit::UsageError(format!("cannot read {}: {e}", schema.display()))
            })?;
            let done = client.call::<SessionMigrate>(&SessionMigrateParams {
                name,
                schema: None,
                schema_text: Some(SchemaText {
                    origin: schema.display().to_string(),
                    text,
                }),
                drop,
                rename,
            })?;
            if json {
                print_json(&done)?;
            } else {
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "none".into()
                    } else {
                        v.join(", ")
                    }
                };
                let renamed: Vec<String> = done
                    .renamed
                    .iter()
                    .map(|(from, to)| format!("{} -> {}", safe(from), safe(to)))
                    .collect();
                println!(
                    "session {} migrated at checkpoint {}: added {}; dropped {}; reducer changed \
                     {}; renamed {}; converted {}",
                    done.session,
                    done.checkpoint,
                    list(&done.added),
                    list(&done.dropped),
                    list(&done.changed),
                    list(&renamed),
                    list(&done.converted)
                );
            }
        }
        SessionCommand::Rm {
            name,
            force,
            reason,
            purge,
            yes,
            salvage_too,
        } => {
            if purge && !yes && !super::purge::confirm(&mut client, &name, salvage_too)? {
                eprintln!("nothing was deleted");
                return Ok(ExitCode::FAILURE);
            }
            let done = client.call::<SessionRm>(&SessionRmParams {
                name,
                force,
                reason,
                purge,
                salvage_too,
            })?;
            if json {
                print_json(&done)?;
            } else {
                print!("{}", super::purge::report(&done));
            }
        }
        SessionCommand::Show { name } => {
            let info = client.call::<SessionShow>(&SessionShowParams { name })?;
            if json {
                print_json(&info)?;
            } else {
                print!("{}", describe(&info));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--rename OLD=NEW` arguments, old name to new.
fn renames(args: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    let mut map = std::collections::BTreeMap::new();
    for arg in args {
        let Some((from, to)) = arg
            .split_once('=')
            .filter(|(f, t)| !f.is_empty() && !t.is_empty())
        else {
            return Err(crate::exit::UsageError(format!(
                "--rename {arg}: give OLD=NEW, the channel's old name and its new one"
            ))
            .into());
        };
        if map.insert(from.to_string(), to.to_string()).is_some() {
            return Err(crate::exit::UsageError(format!(
                "--rename {from}=...: given twice; rename a channel once"
            ))
            .into());
        }
    }
    Ok(map)
}

fn last_update(info: &SessionInfo) -> String {
    info.last_checkpoint_at_ms
        .map(ago)
        .unwrap_or_else(|| "never".into())
}

fn row(info: &SessionInfo) -> Vec<String> {
    vec![
        safe(&info.name),
        info.agents.len().to_string(),
        info.channels.to_string(),
        info.checkpoints.to_string(),
        last_update(info),
        bytes(info.state_bytes),
    ]
}

fn describe(info: &SessionInfo) -> String {
    let mut out = format!(
        "session      {}\nchannels     {}\ncheckpoints  {} (newest {}, oldest readable {})\n\
         last update  {}\nstate size   {} bytes\n",
        safe(&info.name),
        info.channels,
        info.checkpoints,
        info.head,
        info.oldest,
        last_update(info),
        info.state_bytes
    );
    if let (Some(from), Some(at)) = (&info.forked_from, info.forked_at) {
        out.push_str(&format!("forked from  {} at checkpoint {at}\n", safe(from)));
    }
    out.push_str(&format!(
        "schema       {}\n",
        safe(&info.schema.to_string())
    ));
    if info.agents.is_empty() {
        out.push_str("agents       none\n");
    } else {
        for (i, agent) in info.agents.iter().enumerate() {
            let label = if i == 0 { "agents" } else { "" };
            out.push_str(&format!(
                "{label:<12} {}  {}\n",
                safe(&agent.id),
                paint(&safe(&agent.status), status_word_tone(&agent.status))
            ));
        }
    }
    out
}

/// The session grove made for an agent spawned without `--session`: named after it.
fn automatic(session: &SessionInfo) -> bool {
    session.agents.iter().any(|a| a.id == session.name)
}

/// Deleted sessions, for `grove gc --log`.
pub fn removal_table(removals: &[grove_proto::state::SessionRemoval]) -> String {
    let rows = removals
        .iter()
        .map(|r| {
            vec![
                ago(r.at_ms),
                safe(&r.session),
                safe(&r.by),
                safe(&r.reason),
                r.checkpoints.to_string(),
                bytes(r.bytes),
                r.purged
                    .as_ref()
                    .map_or_else(|| "-".into(), super::purge::summary),
            ]
        })
        .collect();
    table(
        &[
            "WHEN",
            "SESSION",
            "BY",
            "WHY",
            "CHECKPOINTS",
            "SIZE",
            "PURGED",
        ],
        rows,
    )
}

/// Every session, however many pages they take.
fn read_all(client: &mut grove_proto::Client) -> Result<SessionListResult> {
    let mut params = SessionListParams::default();
    let mut all = client.call::<SessionList>(&params)?;
    while let Some(after) = all.next.take() {
        params.after = Some(after);
        let mut page = client.call::<SessionList>(&params)?;
        all.sessions.append(&mut page.sessions);
        all.next = page.next;
    }
    Ok(all)
}

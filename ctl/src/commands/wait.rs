use crate::connect::{connect, dirs};
use crate::exit::AGENT_FAILED;
use crate::output::{print_json, result_line};
use anyhow::Result;
use grove_proto::methods::{Wait, WaitMode, WaitParams, WaitUntil};
use grove_proto::paths::Dirs;
use std::process::ExitCode;

pub fn run(
    ids: Vec<String>,
    any: bool,
    until: &str,
    timeout: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let mode = if any { WaitMode::Any } else { WaitMode::All };
    let until = match until {
        "waiting" => WaitUntil::Waiting,
        _ => WaitUntil::Finished,
    };
    let timeout_ms = timeout.map(super::spawn::duration_ms).transpose()?;
    let params = WaitParams {
        ids,
        mode,
        until,
        timeout_ms,
    };
    let list = connect(&dirs()?)?.call::<Wait>(&params)?;
    // With `--any` the arrived ones are what was waited for; the rest still runs.
    let arrived = |a: &grove_proto::types::AgentRecord| {
        a.status.is_final()
            || (until == WaitUntil::Waiting
                && a.activity == Some(grove_proto::types::Activity::Waiting))
    };
    let timed_out = timeout.is_some_and(|limit| {
        let all = list.agents.iter().all(arrived);
        let some = list.agents.iter().any(arrived);
        let done = if any { some } else { all };
        if !done {
            eprintln!(
                "grove: gave up after {limit}: {} of {} agents arrived",
                list.agents.iter().filter(|a| arrived(a)).count(),
                list.agents.len()
            );
        }
        !done
    });
    if json {
        print_json(&list)?;
    } else {
        for record in &list.agents {
            println!("{}", result_line(record));
        }
    }
    if timed_out {
        return Ok(ExitCode::from(AGENT_FAILED));
    }
    // Waiting for input is what `--until waiting` waited for: not a failure.
    let fine = |a: &grove_proto::types::AgentRecord| {
        a.succeeded() || (until == WaitUntil::Waiting && !a.status.is_final())
    };
    Ok(if list.agents.iter().all(fine) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

/// How a command that followed one agent until it ended (`attach`, `logs -f`) ends, as
/// `grove wait` would: the outcome line, on stderr so that stdout stays the agent's
/// output, and exit 1 unless the agent succeeded. The outcome comes on a new connection
/// (the daemon may have restarted meanwhile).
pub fn outcome(dirs: &Dirs, id: &str) -> Result<ExitCode> {
    let finished = connect(dirs)?
        .call::<Wait>(&WaitParams {
            ids: vec![id.to_string()],
            mode: Default::default(),
            until: Default::default(),
            timeout_ms: None,
        })?
        .agents;
    let Some(done) = finished.into_iter().next() else {
        anyhow::bail!("the daemon returned no result for agent {id}");
    };
    eprintln!("{}", result_line(&done));
    Ok(if done.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

use crate::cli::SpawnArgs;
use crate::connect::{connect, dirs};
use crate::exit::{UsageError, AGENT_FAILED};
use crate::output::{print_json, result_line};
use crate::progress::{self, Spinner};
use anyhow::{Context, Result};
use grove_agent_shim::now_ms;
use grove_proto::methods::{EnvVar, Spawn, SpawnParams, Wait, WaitParams};
use grove_proto::types::{AgentStatus, Limits};
use std::process::ExitCode;
use std::time::Duration;

pub fn run(args: SpawnArgs, json: bool) -> Result<ExitCode> {
    let params = params(&args)?;
    if args.print_argv {
        println!("{}", serde_json::to_string(&params.argv)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut client = connect(&dirs()?)?;
    let spinning = progress::wanted(json);
    let record = {
        // The call returns once the worktree is checked out and set up and the agent runs.
        let _spinner = Spinner::start(
            spinning,
            "preparing the worktree".into(),
            progress::SHOW_AFTER,
            Duration::ZERO,
        );
        client.call::<Spawn>(&params)?
    };
    if !args.wait {
        if json {
            print_json(&record)?;
        } else {
            println!("{}", record.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let finished = {
        let (what, since) = match record.status {
            AgentStatus::Queued => (
                format!(
                    "{} waits in the queue (position {})",
                    record.id,
                    record.queue_position.unwrap_or_default()
                ),
                record.created_at_ms,
            ),
            _ => (
                format!("running {}", record.id),
                record.started_at_ms.unwrap_or(record.created_at_ms),
            ),
        };
        let _spinner = Spinner::start(
            spinning,
            what,
            progress::SHOW_AFTER,
            Duration::from_millis(now_ms().saturating_sub(since)),
        );
        client
            .call::<Wait>(&WaitParams {
                ids: vec![record.id.clone()],
                mode: Default::default(),
                until: Default::default(),
                timeout_ms: None,
            })?
            .agents
    };
    let Some(done) = finished.into_iter().next() else {
        anyhow::bail!("the daemon returned no result for agent {}", record.id);
    };
    if json {
        print_json(&done)?;
    } else {
        println!("{}", result_line(&done));
    }
    Ok(if done.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(AGENT_FAILED)
    })
}

fn params(args: &SpawnArgs) -> Result<SpawnParams> {
    if args.agent.is_none() && !args.prompt.is_empty() {
        // Words before `--` are a preset's prompt; without a preset they would be lost.
        return Err(UsageError(format!(
            "`{}` before `--` is neither an option nor a command: a prompt needs --agent NAME \
             (`grove agents` lists them), and the command goes after `--`, e.g. \
             `grove spawn -- make test`; nothing was spawned",
            args.prompt.join(" ")
        ))
        .into());
    }
    if args.command.is_empty() && args.agent.is_none() {
        return Err(UsageError(
            "no command given: put the agent's command after `--`, e.g. `grove spawn -- make test`, \
             or name a preset with --agent (`grove agents` lists them)"
                .into(),
        )
        .into());
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let repo = match &args.repo {
        Some(path) => cwd.join(path),
        None => cwd.clone(),
    };
    let (argv, tty, mut env, jail_home, cli_files) = match &args.agent {
        Some(name) => {
            let prompt = (!args.prompt.is_empty()).then(|| args.prompt.join(" "));
            let preset = super::agents::resolve(name, args.headless, prompt.as_deref(), &repo)?;
            let env: Vec<EnvVar> = preset
                .env
                .into_iter()
                .map(|(name, value)| EnvVar { name, value })
                .collect();
            let tty = preset.tty && !args.headless;
            (preset.argv, tty, env, preset.jail_home, preset.cli_files)
        }
        None => (
            args.command.clone(),
            false,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ),
    };
    // The spawn's own --env comes last, so it wins over the preset's.
    for var in &args.env {
        env.push(env_var(var)?);
    }
    // A preset may ask for a terminal; --tty always does.
    let tty = tty || args.tty;
    Ok(SpawnParams {
        argv,
        repo,
        name: args.name.clone(),
        base: args.base.clone(),
        env,
        caller_env: Some(caller_env()),
        env_clear: args.env_clear,
        env_keep: args.env_keep.clone(),
        timeout_ms: args.timeout.as_deref().map(duration_ms).transpose()?,
        limits: Limits {
            max_files: args.max_files,
            max_procs: args.max_procs,
            memory_bytes: args.memory.as_deref().map(bytes).transpose()?,
            cpu_seconds: args
                .cpu_time
                .as_deref()
                .map(|d| duration_ms(d).map(|ms| ms.div_ceil(1000)))
                .transpose()?,
        },
        keep: args.keep,
        sparse: args.sparse.clone(),
        jail: match (args.jail, args.no_jail) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        jail_write: args.jail_write.iter().map(|p| cwd.join(p)).collect(),
        jail_home,
        cli_files,
        tty,
        tty_size: tty
            .then(|| {
                grove_sys::term::size(std::io::stdout())
                    .or_else(|| grove_sys::term::size(std::io::stdin()))
            })
            .flatten()
            .map(|(rows, cols)| grove_proto::types::TtySize { rows, cols }),
        keep_stdin: args.stdin,
        session: args.session.clone(),
        schema: args
            .schema
            .as_ref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading the schema file {}", path.display()))
                    .map(|text| grove_proto::state::SchemaText {
                        origin: path.display().to_string(),
                        text,
                    })
            })
            .transpose()?,
        stdin_b64: if args.no_stdin || args.print_argv {
            None
        } else {
            piped_stdin()?.map(|bytes| grove_proto::b64::encode(&bytes))
        },
    })
}

/// Input piped or redirected from a file into `grove spawn`, for the agent's stdin.
/// Only a pipe or a regular file is read: a terminal is the user typing, /dev/null and
/// sockets are what scripts and harnesses leave attached. A pipe that never closes
/// blocks here; `--no-stdin` is the way out. Over the cap, nothing is sent and nothing
/// spawned: input is never cut short.
fn piped_stdin() -> Result<Option<Vec<u8>>> {
    use nix::sys::stat::{fstat, SFlag};
    use std::io::Read;
    let stdin = std::io::stdin();
    let Ok(stat) = fstat(&stdin) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Ok(None);
    }
    let cap = grove_proto::MAX_SPAWN_STDIN_BYTES;
    let mut input = Vec::new();
    stdin
        .lock()
        .take(cap as u64 + 1)
        .read_to_end(&mut input)
        .context("reading the input piped into grove spawn")?;
    if input.len() > cap {
        return Err(UsageError(format!(
            "the input piped into grove spawn is over {} KiB, the most an agent's stdin \
             may be given; put it in a file of the repository for the agent to read, or \
             pass --no-stdin; nothing was spawned",
            cap >> 10
        ))
        .into());
    }
    Ok((!input.is_empty()).then_some(input))
}

/// This process's environment, which the agent runs with (the daemon drops grove's
/// identity variables). Variables that are not UTF-8 cannot travel in JSON and stay
/// behind.
pub fn caller_env() -> Vec<EnvVar> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            Some(EnvVar {
                name: k.into_string().ok()?,
                value: v.into_string().ok()?,
            })
        })
        .collect()
}

fn env_var(text: &str) -> Result<EnvVar> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok(EnvVar {
            name: name.into(),
            value: value.into(),
        }),
        _ => Err(UsageError(format!("--env `{text}` is not NAME=VALUE")).into()),
    }
}

/// "90" (seconds), "90s", "10m", "1h30m", "500ms".
pub(crate) fn duration_ms(text: &str) -> Result<u64> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(secs * 1000);
    }
    humantime::parse_duration(text)
        .map(|d| d.as_millis() as u64)
        .map_err(|e| {
            UsageError(format!(
                "`{text}` is not a duration (try 90s, 10m, 2h): {e}"
            ))
            .into()
        })
}

/// "1048576", "512K", "256M", "2G".
fn bytes(text: &str) -> Result<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let multiplier: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(UsageError(format!("`{text}` is not a size (try 512M or 2G)")).into()),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| UsageError(format!("`{text}` is not a size (try 512M or 2G)")).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_parse() {
        assert_eq!(duration_ms("90").unwrap_or_default(), 90_000);
        assert_eq!(duration_ms("2m").unwrap_or_default(), 120_000);
        assert_eq!(duration_ms("500ms").unwrap_or_default(), 500);
        assert!(duration_ms("soon").is_err());
        assert_eq!(bytes("2G").unwrap_or_default(), 2 << 30);
        assert_eq!(bytes("512k").unwrap_or_default(), 512 << 10);
        assert!(bytes("12X").is_err());
        assert!(env_var("A=b=c").is_ok());
        assert!(env_var("=x").is_err());
        assert!(env_var("novalue").is_err());
    }
}

//! The `grove` command. `main` is shared by the installed binary and the test build.

mod cli;
mod commands;
mod connect;
mod daemon_lock;
mod daemon_process;
mod exit;
mod gitcli;
mod inside_agent;
mod log_file;
mod mcp;
mod output;
mod parallel;
mod progress;

use clap::Parser;
use std::process::ExitCode;

pub fn main() -> ExitCode {
    // The fallback shim, when `grove-shim` is missing: it runs before anything else so
    // that it starts fast and touches as little of this big binary as it can.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == grove_agent_shim::SHIM_ARG)
    {
        return grove_agent_shim::main();
    }
    // The daemon's converter of state values (a child with limits): before the CLI is
    // parsed or anything else is set up, as little of this binary as it can.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == grove_state::chain::CONVERT_ARG)
    {
        return convert_state();
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => parse_failed(error),
    };
    output::init_color(cli.color);
    if !matches!(
        cli.command,
        cli::Command::Daemon {
            command: cli::DaemonCommand::Run
        } | cli::Command::Mcp
    ) {
        // `grove list | head`: end quietly when the reader goes away, as Unix tools do,
        // instead of panicking in println!. The daemon keeps ignoring SIGPIPE.
        // SAFETY: setting a signal's disposition to the default touches no memory.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let json = cli.json;
    match commands::run(cli) {
        Ok(code) => code,
        Err(error) if json => {
            eprintln!("{}", exit::json_error(&error));
            exit::code_for(&error)
        }
        Err(error) => {
            // Errors quote agents' names, paths and git's words: escaped like all output.
            eprintln!(
                "grove: error: {}",
                output::safe_block(&format!("{error:#}"), 0)
            );
            exit::code_for(&error)
        }
    }
}

/// clap's refusal, with two additions: `grove spawn sh -c ...` without `--` says where
/// the command goes, and with `--json` the error is JSON on stderr.
fn parse_failed(mut error: clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spawning = args.iter().find(|a| !a.starts_with('-')) == Some(&"spawn".to_string());
    let misplaced = matches!(
        error.kind(),
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
    );
    // Without --agent, words after the options are a command that belongs after `--`
    // (with it, they are the prompt).
    let preset = args
        .iter()
        .any(|a| a == "--agent" || a.starts_with("--agent="));
    if spawning && misplaced && !preset && !args.contains(&"--".into()) {
        let invalid = match error.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(first)) => args.iter().position(|a| a == first),
            _ => None,
        };
        if let Some(from) = first_positional(&args).or(invalid) {
            let (options, command) = args.split_at(from);
            let options = &options[options
                .iter()
                .position(|a| a == "spawn")
                .map_or(0, |i| i + 1)..];
            let mut fixed = vec!["grove spawn".to_string()];
            fixed.extend(options.iter().map(|a| quoted(a)));
            fixed.push("--".into());
            fixed.extend(command.iter().map(|a| quoted(a)));
            error.insert(
                ContextKind::Suggested,
                ContextValue::StyledStrs(vec![format!(
                    "put the agent's command after `--`: {}",
                    fixed.join(" ")
                )
                .into()]),
            );
        }
    }
    if error.use_stderr() && std::env::args().any(|a| a == "--json") {
        let message = error.render().to_string();
        let message = message
            .trim()
            .strip_prefix("error: ")
            .unwrap_or(message.trim());
        eprintln!(
            "{}",
            serde_json::json!({ "error": { "code": exit::USAGE, "message": message } })
        );
        std::process::exit(i32::from(exit::USAGE));
    }
    error.exit()
}

/// Where the first word of `args` (grove's arguments) after `spawn` that is neither an
/// option nor an option's value is.
fn first_positional(args: &[String]) -> Option<usize> {
    use clap::CommandFactory;
    let command = cli::Cli::command();
    let spawn = command.find_subcommand("spawn")?;
    let takes_value = |word: &str| {
        let found = match word.strip_prefix("--") {
            Some(long) => spawn.get_arguments().find(|a| a.get_long() == Some(long)),
            None => {
                let short = word.strip_prefix('-')?.chars().next()?;
                spawn.get_arguments().find(|a| a.get_short() == Some(short))
            }
        };
        found.map(|a| a.get_action().takes_values())
    };
    let start = args.iter().position(|a| a == "spawn")? + 1;
    let mut i = start;
    while i < args.len() {
        let word = &args[i];
        if !word.starts_with('-') || word == "-" {
            return Some(i);
        }
        let inline = word.contains('=') || (word.len() > 2 && !word.starts_with("--"));
        if !inline && takes_value(word).unwrap_or(false) {
            i += 1;
        }
        i += 1;
    }
    None
}

/// An argument as a shell reads it back.
fn quoted(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// `grove __state-convert`: a migration chain on one state, JSON in on stdin and out
/// on stdout (daemon/src/sessions/convert.rs runs it).
fn convert_state() -> ExitCode {
    use grove_state::chain::ConvertInput;
    use std::io::Write;
    let input: ConvertInput = match serde_json::from_reader(std::io::stdin().lock()) {
        Ok(input) => input,
        Err(error) => {
            eprintln!(
                "grove: {}: unreadable input: {error}",
                grove_state::chain::CONVERT_ARG
            );
            return ExitCode::from(2);
        }
    };
    let output = input.run();
    let mut stdout = std::io::stdout().lock();
    match serde_json::to_writer(&mut stdout, &output).map(|()| stdout.flush()) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

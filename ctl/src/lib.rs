//! The `grove` command. `main` is shared by the installed binary and the test build.

mod cli;
mod commands;
mod connect;
mod daemon_process;
mod exit;
mod gitcli;
mod log_file;
mod mcp;
mod output;
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
    let cli = cli::Cli::parse();
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
    match commands::run(cli) {
        Ok(code) => code,
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

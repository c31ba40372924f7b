//! One file per command.

mod daemon;
mod diff;
mod kill;
mod list;
mod logs;
mod show;
mod spawn;
mod wait;

use crate::cli::{Cli, Command};
use anyhow::Result;
use std::process::ExitCode;

pub fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Spawn(args) => spawn::run(*args, json),
        Command::List { all } => list::run(all, json),
        Command::Show { id } => show::run(&id, json),
        Command::Logs { id, follow } => logs::run(&id, follow, json),
        Command::Wait { ids } => wait::run(ids, json),
        Command::Kill { id, no_wait } => kill::run(&id, no_wait, json),
        Command::Diff { id } => diff::run(&id, json),
        Command::Daemon { command } => daemon::run(command, json),
    }
}

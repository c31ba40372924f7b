//! One file per command.

mod agents;
mod ask;
mod attach;
mod completions;
mod config;
mod daemon;
mod diff;
mod discard;
mod doctor;
mod gc;
mod kill;
mod list;
mod logs;
mod merge;
mod metrics;
mod overlaps;
mod pause;
mod purge;
mod queue;
mod report;
mod restore;
mod review;
mod rm;
mod salvaged;
mod screen;
mod send;
mod session;
mod show;
mod spawn;
mod state;
mod top;
mod trust;
mod wait;

pub use agents::resolve as resolve_preset;
pub use spawn::caller_env;

use crate::cli::{Cli, Command};
use anyhow::Result;
use std::process::ExitCode;

pub fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Spawn(args) => spawn::run(*args, json),
        Command::Agents => agents::run(json),
        Command::List { all, filter } => list::run(all, &filter, json),
        Command::Show { id } => show::run(&id, json),
        Command::Logs { id, follow, raw } => logs::run(&id, follow, raw, json),
        Command::Wait {
            ids,
            any,
            until,
            timeout,
        } => wait::run(ids, any, &until, timeout.as_deref(), json),
        Command::Attach {
            id,
            read_only,
            detach_key,
        } => attach::run(&id, read_only, &detach_key),
        Command::Send {
            id,
            text,
            no_enter,
            stdin,
        } => send::run(&id, text, !no_enter, stdin, json),
        Command::Screen { id, ansi } => screen::run(&id, ansi, json),
        Command::Status { activity, id } => send::status(&activity, id, json),
        Command::Report { text, id } => report::run(&text, id, json),
        Command::Ask {
            question,
            choices,
            timeout,
        } => ask::ask(question, choices, timeout.as_deref(), json),
        Command::Answer { id, text } => ask::answer(id, text, json),
        Command::Kill { ids, no_wait } => kill::run(&ids, no_wait, json),
        Command::Pause { id } => pause::run(&id, true, json),
        Command::Resume { id } => pause::run(&id, false, json),
        Command::Diff { id, stat, paths } => diff::run(&id, stat, &paths, json),
        Command::Review { id, all } => review::run(id, all, json),
        Command::Merge(args) => {
            let mode = match (args.squash, args.rebase) {
                (true, _) => merge::Mode::Squash,
                (_, true) => merge::Mode::Rebase,
                _ => merge::Mode::Merge,
            };
            merge::run(&args.id, mode, args.into, args.delete, json)
        }
        Command::Discard { id, merged, yes } => match id {
            Some(id) if !merged => discard::run(&id, yes, json),
            _ => discard::run_merged(yes, json),
        },
        Command::Overlaps { hunks } => overlaps::run(hunks, json),
        Command::Queue => queue::run(json),
        Command::Metrics => metrics::run(json),
        Command::Rm { id } => rm::run(&id, json),
        Command::Gc { dry_run, log } => gc::run(dry_run, log, json),
        Command::Salvaged => salvaged::run(json),
        Command::Restore { reference, repo } => restore::run(&reference, repo, json),
        Command::Trust { repo, revoke } => trust::run(repo, revoke, json),
        Command::State { command } => state::run(command, json),
        Command::Session { command } => session::run(command, json),
        Command::Top { once } => top::run(once, json),
        Command::Doctor => doctor::run(json),
        Command::Config => config::run(json),
        Command::Completions { shell } => completions::completions(shell),
        Command::Man => completions::man(),
        Command::CompleteAgents => completions::agents(),
        Command::Mcp => crate::mcp::run(),
        Command::Daemon { command } => daemon::run(command, json),
    }
}

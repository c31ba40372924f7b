//! `grove completions SHELL` and `grove man`: generated from the clap definitions, so
//! they never drift from the commands.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_mangen::Man;
use std::io::Write;
use std::process::ExitCode;

pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "grove", &mut out);
    out.flush().context("writing the completion script")?;
    Ok(ExitCode::SUCCESS)
}

/// grove(1): one page with every command and its options, and the exit codes.
pub fn man() -> Result<ExitCode> {
    let page = man_page().context("rendering the man page")?;
    let mut out = std::io::stdout().lock();
    out.write_all(&page).context("writing the man page")?;
    out.flush().context("writing the man page")?;
    Ok(ExitCode::SUCCESS)
}

fn man_page() -> std::io::Result<Vec<u8>> {
    let mut command = Cli::command();
    command.build();
    let main = Man::new(command.clone());
    let mut out = Vec::new();
    main.render_title(&mut out)?;
    main.render_name_section(&mut out)?;
    main.render_synopsis_section(&mut out)?;
    main.render_description_section(&mut out)?;
    main.render_options_section(&mut out)?;
    out.extend_from_slice(b".SH COMMANDS\n");
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_command(&mut out, sub)?;
    }
    let mut extra = Vec::new();
    main.render_extra_section(&mut extra)?;
    out.extend_from_slice(&retitle(&extra, Some(".SH \"EXIT STATUS\"")));
    main.render_version_section(&mut out)?;
    Ok(out)
}

/// One command as a subsection: synopsis, description, options; then its subcommands.
fn render_command(out: &mut Vec<u8>, sub: &clap::Command) -> std::io::Result<()> {
    let name = sub
        .get_bin_name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("grove {}", sub.get_name()));
    let page = Man::new(sub.clone());
    writeln!(out, ".SS \"{name}\"")?;
    let mut part = Vec::new();
    page.render_synopsis_section(&mut part)?;
    out.extend_from_slice(&retitle(&part, None));
    part.clear();
    page.render_description_section(&mut part)?;
    out.extend_from_slice(&retitle(&part, Some(".PP")));
    if sub.get_arguments().any(|a| !a.is_hide_set()) {
        part.clear();
        page.render_options_section(&mut part)?;
        out.extend_from_slice(&retitle(&part, Some(".PP\n\\fIOptions:\\fR")));
    }
    for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_command(out, nested)?;
    }
    Ok(())
}

/// Replaces (or drops) the `.SH` headings of a rendered section.
fn retitle(roff: &[u8], with: Option<&str>) -> Vec<u8> {
    let text = String::from_utf8_lossy(roff);
    let mut result = String::new();
    for line in text.lines() {
        if line.starts_with(".SH ") {
            if let Some(with) = with {
                result.push_str(with);
                result.push('\n');
            }
        } else {
            result.push_str(line);
            result.push('\n');
        }
    }
    result.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_man_page_has_every_command_and_the_exit_codes() {
        let page = String::from_utf8(man_page().expect("render")).expect("utf-8");
        for needle in [
            ".TH grove",
            "grove spawn",
            "grove state update",
            "grove daemon install",
            "EXIT STATUS",
            "daemon is unreachable",
        ] {
            assert!(page.contains(needle), "no {needle:?} in the man page");
        }
        assert!(!page.contains(".SH SYNOPSIS\n.SH"), "empty sections");
    }
}

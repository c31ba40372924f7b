//! `grove completions SHELL` and `grove man`: generated from the clap definitions, so
//! they never drift from the commands.

use crate::cli::{Cli, EXIT_CODES};
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_mangen::Man;
use std::io::Write;
use std::process::ExitCode;

pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "grove", &mut script);
    let script = without_internal(shell, &String::from_utf8_lossy(&script));
    let script = with_agents(shell, script);
    let mut out = std::io::stdout().lock();
    out.write_all(script.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the completion script")?;
    Ok(ExitCode::SUCCESS)
}

/// The commands whose argument is an agent.
const TAKE_AN_AGENT: &str =
    "show logs wait kill diff review merge discard rm attach send screen pause resume answer";

/// The internal command the scripts ask for agents: never offered as a command.
const INTERNAL: &str = "__agents";

/// clap's script without [`INTERNAL`] among the commands it offers (clap lists hidden
/// subcommands in the scripts' word lists).
fn without_internal(shell: clap_complete::Shell, script: &str) -> String {
    use clap_complete::Shell;
    let offers = |line: &str| match shell {
        Shell::Fish => line.contains(&format!("-a \"{INTERNAL}\"")),
        Shell::Zsh => line.trim_start().starts_with(&format!("'{INTERNAL}:")),
        _ => false,
    };
    let mut out = String::with_capacity(script.len());
    for line in script.lines() {
        if offers(line) {
            continue;
        }
        if shell == Shell::Bash && line.trim_start().starts_with("opts=\"") {
            let words: Vec<&str> = line.split(' ').filter(|w| *w != INTERNAL).collect();
            out.push_str(&words.join(" "));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// clap's script, taught to complete agent ids and names (asked of `grove __agents`
/// at each completion, so they are always the current ones).
fn with_agents(shell: clap_complete::Shell, script: String) -> String {
    use clap_complete::Shell;
    match shell {
        Shell::Bash => format!(
            "{script}\n{}",
            BASH_AGENTS.replace("TAKE_AN_AGENT", &TAKE_AN_AGENT.replace(' ', "|"))
        ),
        Shell::Zsh => {
            let script = script
                .replace("':id:_default'", "':id:_grove_agents'")
                .replace("'::id:_default'", "'::id:_grove_agents'")
                .replace("'*::ids:_default'", "'*::ids:_grove_agents'");
            match script.find("if [ \"$funcstack[1]\" = \"_grove\" ]") {
                Some(at) => format!("{}{ZSH_AGENTS}\n{}", &script[..at], &script[at..]),
                None => script,
            }
        }
        Shell::Fish => format!(
            "{script}complete -c grove -n \"__fish_grove_using_subcommand {TAKE_AN_AGENT}\" -f \
             -a \"(grove __agents 2>/dev/null)\"\n"
        ),
        _ => script,
    }
}

const BASH_AGENTS: &str = r#"_grove_with_agents() {
    local i cmd="" cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --color) ((i++)) ;;
            -*) ;;
            *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    case "$cmd" in
        TAKE_AN_AGENT)
            case "$cur$prev" in
                -*|*--into|*--color|*--repo) ;;
                *)
                    COMPREPLY=($(compgen -W "$(grove __agents 2>/dev/null)" -- "$cur"))
                    return 0 ;;
            esac ;;
    esac
    _grove "$@"
}
if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _grove_with_agents -o nosort -o bashdefault -o default grove
else
    complete -F _grove_with_agents -o bashdefault -o default grove
fi
"#;

const ZSH_AGENTS: &str = r#"(( $+functions[_grove_agents] )) ||
_grove_agents() {
    local -a agents
    agents=(${(f)"$(grove __agents 2>/dev/null)"})
    compadd -a agents
}
"#;

/// `grove __agents`: ids and names, from a daemon that already runs.
pub fn agents() -> Result<ExitCode> {
    let Ok(dirs) = crate::connect::dirs() else {
        return Ok(ExitCode::SUCCESS);
    };
    let Ok(mut client) = crate::connect::connect_existing(&dirs) else {
        return Ok(ExitCode::SUCCESS);
    };
    let agents = crate::connect::list_agents(&mut client, true).unwrap_or_default();
    let mut words: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    words.extend(agents.iter().filter_map(|a| a.name.as_deref()));
    words.sort_unstable();
    words.dedup();
    let mut out = std::io::stdout().lock();
    for word in words {
        // A name with whitespace or a shell metacharacter would complete as garbage.
        if !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            writeln!(out, "{word}")?;
        }
    }
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
    for sub in visible(&command) {
        render_command(&mut out, sub)?;
    }
    out.extend_from_slice(exit_status().as_bytes());
    main.render_version_section(&mut out)?;
    Ok(out)
}

/// One command as a subsection: synopsis, description, options; then its subcommands.
fn render_command(out: &mut Vec<u8>, sub: &clap::Command) -> std::io::Result<()> {
    let name = sub
        .get_bin_name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("grove {}", sub.get_name()));
    // The global options are described once, at the top of the page.
    let page = Man::new(sub.clone().mut_args(|arg| {
        let global = ["json", "color", "help", "version"].contains(&arg.get_id().as_str());
        arg.hide(global)
    }));
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
    for nested in visible(sub) {
        render_command(out, nested)?;
    }
    Ok(())
}

/// The subcommands worth a section: not hidden, and not clap's `help`.
fn visible(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// The exit codes of `grove --help` as a roff list.
fn exit_status() -> String {
    let mut roff = String::from(".SH \"EXIT STATUS\"\n");
    for line in EXIT_CODES.lines().skip(1) {
        if let Some((code, meaning)) = line.trim().split_once("  ") {
            roff.push_str(&format!(
                ".TP\n\\fB{}\\fR\n{}\n",
                escape(code),
                escape(meaning.trim())
            ));
        }
    }
    roff
}

/// Text safe in roff: backslashes and hyphens escaped, no line starting a request.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
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
        assert!(
            !page.contains("grove help"),
            "clap's help command is no section"
        );
        assert!(
            page.contains(".TP\n\\fB3\\fR\nthe daemon is unreachable"),
            "{page}"
        );
        assert_eq!(escape("--wait"), "\\-\\-wait");
    }
}

//! `grove session rm --purge`: asks first (a purge deletes branches, whose work may be
//! merged nowhere), then says what went, with each branch's tip so that `git branch
//! NAME COMMIT` can bring it back.

use crate::exit::UsageError;
use crate::output::{bytes, safe};
use anyhow::Result;
use grove_proto::methods::{SessionShow, SessionShowParams};
use grove_proto::state::{Purged, SessionRemoval};
use std::io::IsTerminal;

/// Whether the user agrees to purge `name`; without a terminal to ask on, refused.
pub fn confirm(client: &mut grove_proto::Client, name: &str, salvage_too: bool) -> Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(UsageError(format!(
            "not purging session {} without confirmation, and there is no terminal to ask \
             on; add --yes to purge it; nothing was deleted",
            safe(name)
        ))
        .into());
    }
    let info = client.call::<SessionShow>(&SessionShowParams { name: name.into() })?;
    eprintln!(
        "session {}: {} checkpoints with their code refs",
        safe(name),
        info.checkpoints
    );
    for agent in &info.agents {
        eprintln!("  agent {}: its record, logs and branch", safe(&agent.id));
    }
    if salvage_too {
        eprintln!("  and its agents' salvage refs");
    }
    eprint!("Delete all of it? [y/N] ");
    super::discard::yes_from(&stdin)
}

/// What a removal deleted, a line each.
pub fn report(done: &SessionRemoval) -> String {
    let mut out = format!(
        "deleted session {} ({} checkpoints, {})\n",
        safe(&done.session),
        done.checkpoints,
        bytes(done.bytes)
    );
    let Some(purged) = &done.purged else {
        return out;
    };
    for id in &purged.agents {
        out.push_str(&format!(
            "deleted agent {}: its record and logs\n",
            safe(id)
        ));
    }
    for b in &purged.branches {
        out.push_str(&format!(
            "deleted branch {} at {} in {} (`git branch {} {}` brings it back)\n",
            safe(&b.name),
            b.commit,
            b.repo.display(),
            safe(&b.name),
            b.commit
        ));
    }
    if !purged.checkpoint_refs.is_empty() {
        out.push_str(&format!(
            "deleted {} checkpoint code refs\n",
            purged.checkpoint_refs.len()
        ));
    }
    for r in &purged.salvage_refs {
        out.push_str(&format!(
            "deleted salvage ref {} at {}\n",
            safe(&r.name),
            r.commit
        ));
    }
    out
}

/// What a purge deleted, in a few words (`grove gc --log`; `--json` has every ref).
pub fn summary(purged: &Purged) -> String {
    format!(
        "{} agents, {} branches, {} checkpoint refs, {} salvage refs",
        purged.agents.len(),
        purged.branches.len(),
        purged.checkpoint_refs.len(),
        purged.salvage_refs.len()
    )
}

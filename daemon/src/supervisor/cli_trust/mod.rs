//! Trust for an agent's worktree in its CLI's own trust store. Every agent is a new
//! folder, so Gemini CLI, Codex and Claude Code would ask "trust this folder?" on every
//! spawn, and an interactive preset would stop at that dialog. When the user already
//! trusts the repository in that CLI (by the CLI's own rule, `stores.rs`), grove adds
//! an entry for the worktree alone before the agent starts, and removes exactly that
//! entry when the worktree goes. An untrusted repository still asks.
//!
//! A jailed agent's entry goes into its private home's copy of the store
//! (`jail_home.rs`), which goes with its TMPDIR; the user's file is written only for
//! an unjailed agent whose CLI's rule does not already cover its worktree (Codex and
//! Claude Code take a linked worktree for its main checkout; Gemini CLI does not).
//! That write is noted first in a ledger, `<state>/cli-trust/<id>.json`, so that a
//! crash between the write and the worktree's removal leaves the entry to the next
//! collect or start-up scan ([`release`], [`sweep`]), never to the user.
//!
//! The file keeps the rest of its text byte for byte (`json_members.rs`, `toml_edit`),
//! is replaced in one rename, and is never reached through a symbolic link
//! (`file.rs`). Trust is a convenience: a store grove cannot read or write is left
//! alone and the CLI asks as it would.

mod file;
mod json_members;
mod stores;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
pub use stores::Cli;
use stores::Says;

/// grove's own writes of the stores, one at a time: two agents' preparations or
/// collects must not lose each other's entry.
static WRITES: Mutex<()> = Mutex::new(());

/// How long a CLI's lock on its file may be held before it is a dead writer's
/// (`proper-lockfile`'s default).
const STALE_LOCK: Duration = Duration::from_secs(10);

/// An agent about to start.
pub struct Grant<'a> {
    /// Its program (`argv[0]`): which CLI it is.
    pub program: &'a str,
    /// The user's repository, whose trust the worktree gets.
    pub repo: &'a Path,
    pub worktree: &'a Path,
    /// The home the CLI will read: the user's, or the jailed agent's private one.
    pub home: &'a Path,
    /// The agent's environment (a variable of [`Cli::moved_by`] leaves it alone).
    pub env: &'a [(String, String)],
    /// The ledger noting an entry in the user's file; `None` for a private home.
    pub ledger: Option<&'a Path>,
}

/// What the ledger of an entry in the user's file holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    cli: Cli,
    home: PathBuf,
    worktree: PathBuf,
}

/// Where an agent's ledger is kept.
pub fn ledger_path(state_dir: &Path, agent_id: &str) -> PathBuf {
    state_dir.join("cli-trust").join(format!("{agent_id}.json"))
}

/// Trusts the worktree in its CLI's store when the store trusts the repository.
pub fn grant(grant: &Grant<'_>) {
    let Some(cli) = Cli::of_program(grant.program) else {
        return;
    };
    if let Some((var, _)) = grant
        .env
        .iter()
        .find(|(k, _)| cli.moved_by().contains(&k.as_str()))
    {
        tracing::debug!(
            cli = cli.title(),
            var,
            "trust store left alone: the agent sets {var}"
        );
        return;
    }
    match add(cli, grant) {
        Ok(true) => tracing::info!(
            cli = cli.title(),
            worktree = %grant.worktree.display(),
            home = %grant.home.display(),
            "trusted the worktree as its repository is"
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(cli = cli.title(), error = %e, "cannot trust the worktree"),
    }
}

fn add(cli: Cli, grant: &Grant<'_>) -> Result<bool, String> {
    let (Ok(repo), Ok(worktree)) = (grant.repo.canonicalize(), grant.worktree.canonicalize())
    else {
        return Ok(false);
    };
    let folder = worktree
        .to_str()
        .ok_or("the worktree's path is not UTF-8")?;
    let (dir, name) = cli.location();
    let _writes = WRITES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(store) = file::Dir::open(grant.home, dir).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let _lock = take_lock(cli, &store, name)?;
    let Some(old) = store.read(name).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    // The user (or the CLI's rule) already decided for this folder: theirs stands.
    if cli.says(&old.text, &worktree)? != Says::Nothing
        || cli.says(&old.text, &repo)? != Says::Trusted
    {
        return Ok(false);
    }
    let text = cli.add(&old.text, folder)?;
    if cli.says(&text, &worktree)? != Says::Trusted {
        return Err(format!("{name}: the entry added does not hold"));
    }
    if let Some(ledger) = grant.ledger {
        let entry = Entry {
            cli,
            home: grant.home.to_path_buf(),
            worktree: worktree.clone(),
        };
        write_ledger(ledger, &entry).map_err(|e| format!("{}: {e}", ledger.display()))?;
    }
    store
        .replace(name, &old, &text)
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(true)
}

/// The CLI's own lock on the file while it is read and replaced, where it takes one.
fn take_lock<'a>(
    cli: Cli,
    store: &'a file::Dir,
    name: &str,
) -> Result<Option<file::Lock<'a>>, String> {
    if !cli.locks() {
        return Ok(None);
    }
    match store.lock(name, STALE_LOCK).map_err(|e| e.to_string())? {
        Some(lock) => Ok(Some(lock)),
        None => Err(format!("{name} stays locked by {}", cli.title())),
    }
}

fn write_ledger(ledger: &Path, entry: &Entry) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = ledger.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let text = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
    let temp = ledger.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    std::io::Write::write_all(&mut file, &text)?;
    file.sync_all()?;
    std::fs::rename(&temp, ledger)
}

/// Removes the entry an agent's ledger notes once its worktree is gone (a kept
/// worktree keeps it), then the ledger. A store that cannot be written now keeps the
/// ledger for the next start-up scan.
pub fn release(ledger: &Path) {
    let entry: Entry = match std::fs::read(ledger) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!(ledger = %ledger.display(), error = %e, "unreadable trust ledger: removed");
                let _ = std::fs::remove_file(ledger);
                return;
            }
        },
        Err(_) => return,
    };
    if entry.worktree.symlink_metadata().is_ok() {
        return;
    }
    // Only ever the user's own file: grove writes no other home's.
    if super::jail_home::user_home().as_deref() != Some(entry.home.as_path()) {
        tracing::warn!(ledger = %ledger.display(), home = %entry.home.display(), "a trust ledger names another home: removed, nothing changed");
        let _ = std::fs::remove_file(ledger);
        return;
    }
    match remove(&entry) {
        Ok(removed) => {
            if removed {
                tracing::info!(cli = entry.cli.title(), worktree = %entry.worktree.display(), "removed the worktree's trust entry");
            }
            let _ = std::fs::remove_file(ledger);
        }
        Err(e) => {
            tracing::warn!(cli = entry.cli.title(), error = %e, "cannot remove the worktree's trust entry yet")
        }
    }
}

fn remove(entry: &Entry) -> Result<bool, String> {
    let folder = entry.worktree.to_str().ok_or("not UTF-8")?;
    let (dir, name) = entry.cli.location();
    let _writes = WRITES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(store) = file::Dir::open(&entry.home, dir).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let _lock = take_lock(entry.cli, &store, name)?;
    let Some(old) = store.read(name).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let Some(text) = entry.cli.remove(&old.text, folder)? else {
        return Ok(false);
    };
    store
        .replace(name, &old, &text)
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(true)
}

/// [`release`] for every ledger a crash left (start-up scan).
pub fn sweep(state_dir: &Path) {
    let Ok(ledgers) = std::fs::read_dir(state_dir.join("cli-trust")) else {
        return;
    };
    for ledger in ledgers.flatten() {
        let path = ledger.path();
        if path.extension().is_some_and(|e| e == "json") {
            release(&path);
        }
    }
}

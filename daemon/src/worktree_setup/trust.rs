//! Setup commands run only from a `.grove.toml` the user approved (`grove trust`), like
//! `direnv allow`: a cloned repository's commands do not run on the first spawn, and a
//! changed file needs approval again. The approval is the SHA-256 of the file's exact
//! content, one per repository, in the daemon's database.

use crate::db::Db;
use crate::error::Error;
use crate::git::target::RepoTarget;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// The key a repository's approval is stored under: its main checkout.
pub fn repo_key(target: &RepoTarget) -> String {
    target.workdir.display().to_string()
}

pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// Refuses setup commands from `text` (the file at `origin`) unless the user approved
/// exactly this content for this repository.
pub async fn check(
    db: &Db,
    target: &RepoTarget,
    text: &str,
    origin: &str,
    commands: &[String],
) -> Result<(), Error> {
    if commands.is_empty() {
        return Ok(());
    }
    let key = repo_key(target);
    let approved = db
        .call(move |conn| crate::db::trust::approved(conn, &key))
        .await?;
    let hash = sha256_hex(text);
    if approved.as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    let listed: String = commands.iter().map(|c| format!("\n  $ {c}")).collect();
    let state = if approved.is_some() {
        "has changed since you approved it; its setup commands are"
    } else {
        "has setup commands you have not approved:"
    };
    Err(Error::Refused(format!(
        "{origin} {state}{listed}\nThey run before every agent in this repository. Read \
         them, then run `grove trust` in {} to approve this exact content. Nothing was \
         created.",
        target.workdir.display()
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            super::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

//! `repo.trust`: the user approves (or withdraws approval of) the exact content of a
//! repository's `.grove.toml`, so that its setup commands may run. Never an agent's to
//! give: an agent that could approve could run anything outside its jail.

use super::super::Ctx;
use crate::db::trust;
use crate::worktree_setup::trust::{repo_key, sha256_hex};
use crate::Error;
use grove_proto::methods::{TrustParams, TrustResult};
use grove_proto::now_ms;

pub async fn handle(ctx: &Ctx, params: TrustParams) -> Result<TrustResult, Error> {
    let target = super::client_repo(&params.repo).await?;
    let file = target.workdir.join(".grove.toml");
    let key = repo_key(&target);
    if params.revoke {
        let revoked = ctx.db.call(move |conn| trust::revoke(conn, &key)).await?;
        return Ok(TrustResult {
            file,
            setup: Vec::new(),
            sha256: None,
            revoked,
        });
    }
    // The daemon reads the file itself: what it stores is the hash of exactly the
    // commands it answers with, whatever changes on disk meanwhile.
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::BadInput(format!(
                "{} does not exist: there is nothing to approve",
                file.display()
            )))
        }
        Err(e) => {
            return Err(Error::BadInput(format!(
                "cannot read {}: {e}",
                file.display()
            )))
        }
    };
    let setup = crate::worktree_setup::parse(&text, &file.display().to_string())?;
    let sha256 = sha256_hex(&text);
    if let Some(shown) = &params.sha256 {
        if !shown.eq_ignore_ascii_case(&sha256) {
            return Err(Error::Changed(format!(
                "{} changed since it was shown (its SHA-256 is now {sha256}); nothing was \
                 approved: run `grove trust` again and read it",
                file.display()
            )));
        }
    }
    if !params.preview {
        let stored = sha256.clone();
        ctx.db
            .call(move |conn| trust::approve(conn, &key, &stored, now_ms()))
            .await?;
    }
    Ok(TrustResult {
        file,
        setup: setup.setup,
        sha256: Some(sha256),
        revoked: false,
    })
}

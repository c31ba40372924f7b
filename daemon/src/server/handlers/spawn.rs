//! `agent.spawn`: check the request, resolve repository and base, check the disk, then
//! hand the agent to the core, which starts it or queues it. Any failure leaves nothing
//! behind.

use super::super::connection::Conn;
use super::super::Ctx;
use crate::core::NewAgent;
use crate::git::target::resolve_repo;
use crate::git::worktree;
use crate::Error;
use grove_proto::methods::SpawnParams;
use grove_proto::types::AgentRecord;

pub async fn handle(ctx: &Ctx, conn: &Conn, mut params: SpawnParams) -> Result<AgentRecord, Error> {
    validate(&params)?;
    check_console_path(ctx, &params)?;
    let stdin = params
        .stdin_b64
        .take()
        .map(|text| decode_stdin(&text))
        .transpose()?;
    crate::spawn_defaults::resolve(&mut params, &ctx.config)?;
    // An agent's spawns are its children: recorded as such, one level deeper.
    let parent = conn.agent().cloned();
    let depth = parent.as_ref().map_or(0, |p| p.depth + 1);
    if depth > ctx.config.max_depth {
        return Err(Error::Refused(format!(
            "agent {} is at nesting depth {} and may not spawn: the limit is {} (max_depth)",
            parent.as_ref().map_or("?", |p| p.id.as_str()),
            depth - 1,
            ctx.config.max_depth
        )));
    }
    // An agent's children share its state or get a session of their own; naming any
    // other session would let the agent read and write state that is not its own.
    if let Some(parent) = &parent {
        if let Some(named) = params.session.as_deref().filter(|s| *s != parent.session) {
            return Err(Error::Refused(format!(
                "agent {} may spawn children only into its own session `{}` (or, without \
                 --session, a new one of their own), not into `{named}`",
                parent.id, parent.session
            )));
        }
    }
    // A jailed agent's children are jailed too, with no more than it may write: a
    // nested spawn is no way out of the jail.
    // From inside a jailed agent's own repository, a spawn is one in the user's
    // repository, based (without --base) on the agent's HEAD, brought in first.
    let jailed_parent = match &parent {
        Some(parent) => Some(ctx.core.get(&parent.id).await?).filter(|p| p.jail),
        None => None,
    };
    // Before a jailed parent's own repository is swapped for the user's: the same
    // place is meant, relative to whichever worktree the caller stands in.
    let subdir = crate::git::target::caller_subdir(&params.repo);
    let mut from_own_repo = None;
    if let Some(parent) = &jailed_parent {
        params.jail = Some(true);
        params.jail_write = parent.jail_write.clone();
        // Its child's home is copied from the user's too: no more of it than the
        // parent itself got, or a nested spawn would reach files the parent could not.
        if let Some(extra) = params
            .jail_home
            .iter()
            .find(|entry| !parent.jail_home.contains(entry))
        {
            return Err(Error::Refused(format!(
                "agent {} may give its children only what of $HOME it got itself ({}); \
                 `{extra}` is not among it",
                parent.id,
                if parent.jail_home.is_empty() {
                    "nothing".to_string()
                } else {
                    parent.jail_home.join(", ")
                }
            )));
        }
        let inside =
            std::fs::canonicalize(&params.repo).is_ok_and(|p| p.starts_with(&parent.worktree));
        if inside {
            params.repo = parent.repo.clone();
            let scratch = ctx.config.dirs.agent_dir(&parent.id).join("base.git");
            from_own_repo = Some((parent.worktree.clone(), scratch));
        }
    }
    if params.jail == Some(true) && !params.sparse.is_empty() {
        return Err(crate::git::own_repo::sparse_refusal());
    }
    let repo_path = params.repo.clone();
    let target = tokio::task::spawn_blocking(move || resolve_repo(&repo_path)).await??;
    if let Some(parent) = &jailed_parent {
        own_repository_only(parent, &target)?;
    }
    let wanted_base = params.base.clone();
    let caller_git_dir = target.caller_git_dir.clone();
    let max_file = ctx.config.salvage_max_file;
    let resolved = ctx
        .lanes
        .run(&target, move |lane| match from_own_repo {
            Some((agent_repo, scratch)) if wanted_base.is_none() => {
                crate::git::own_repo::import_head(lane, &agent_repo, &scratch, max_file)
            }
            _ => worktree::resolve_base(lane, wanted_base.as_deref(), &caller_git_dir)
                .map(|b| (b.name, b.commit)),
        })
        .await;
    let (base_name, base_commit) = match (resolved, &params.base) {
        (Ok(found), _) => found,
        // Not a ref git knows: an agent's id or name stands for its branch.
        (Err(not_a_ref), Some(base)) => {
            let viewer = parent.as_ref().map(|p| p.id.as_str());
            match ctx.core.get_for(base, viewer).await {
                Ok(agent) if agent.branch_exists => {
                    let caller_git_dir = target.caller_git_dir.clone();
                    let branch = agent.branch.clone();
                    ctx.lanes
                        .run(&target, move |lane| {
                            worktree::resolve_base(lane, Some(&branch), &caller_git_dir)
                                .map(|b| (b.name, b.commit))
                        })
                        .await?
                }
                _ => return Err(not_a_ref),
            }
        }
        (Err(e), None) => return Err(e),
    };
    let grove_toml = read_grove_toml(&target)?;
    let schema = session_schema(&params, grove_toml.as_ref())?;
    let setup = match &grove_toml {
        Some((text, origin)) => {
            let setup = crate::worktree_setup::parse(text, origin)?;
            crate::worktree_setup::trust::check(&ctx.db, &target, text, origin, &setup.setup)
                .await?;
            setup
        }
        None => Default::default(),
    };
    ctx.janitor.check_disk().await?;
    let charged = charge_tree(ctx, parent.as_ref(), &params).await?;
    if let Some(name) = &params.session {
        ctx.state
            .ensure(name, schema.clone(), params.schema.is_some())
            .await?;
    }
    let spawned = ctx
        .core
        .spawn(NewAgent {
            params,
            schema,
            setup,
            parent: parent.map(|p| p.id),
            depth,
            target,
            base_name,
            base_commit: base_commit.to_string(),
            subdir,
            stdin,
            idempotency_key: conn.idempotency_key().map(String::from),
        })
        .await;
    if let (Err(_), Some((root, bytes))) = (&spawned, &charged) {
        ctx.state.tree_db().refund(root, *bytes);
    }
    spawned
}

/// An agent's child is stored as its request says (its record, the environment it
/// waits with, its schema): counted against the agent's tree (`tree_max_db`), before
/// anything of it is stored.
async fn charge_tree(
    ctx: &Ctx,
    parent: Option<&crate::core::Identity>,
    params: &SpawnParams,
) -> Result<Option<(String, u64)>, Error> {
    let Some(parent) = parent else {
        return Ok(None);
    };
    let bytes = crate::sessions::budget::ROW_BYTES + crate::sessions::json_bytes(params);
    ctx.state
        .tree_db()
        .charge_loaded(&parent.root, &parent.id, bytes)
        .await?;
    Ok(Some((parent.root.clone(), bytes)))
}

/// A jailed agent spawns only in its own repository: anywhere else, worktree creation
/// and setup would run on a repository (hooks, config, `.grove.toml`) the jail keeps
/// it from writing, but not from choosing.
fn own_repository_only(
    parent: &AgentRecord,
    target: &crate::git::target::RepoTarget,
) -> Result<(), Error> {
    let own = parent
        .repo
        .canonicalize()
        .unwrap_or_else(|_| parent.repo.clone());
    if own == target.workdir {
        return Ok(());
    }
    Err(Error::Refused(format!(
        "agent {} is jailed and may spawn only in its own repository {}, not in {}; \
         nothing was created",
        parent.id,
        own.display(),
        target.workdir.display()
    )))
}

/// The repository's `.grove.toml` (text and path), if it has one.
fn read_grove_toml(
    target: &crate::git::target::RepoTarget,
) -> Result<Option<(String, String)>, Error> {
    let path = target.workdir.join(".grove.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some((text, path.display().to_string()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::BadInput(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// The schema a new session gets: `--schema`, else `[state]` of the repository's
/// `.grove.toml`, else none (a session without channels).
fn session_schema(
    params: &SpawnParams,
    grove_toml: Option<&(String, String)>,
) -> Result<Option<grove_state::Schema>, Error> {
    let parse = |text: &str, origin: &str| {
        grove_state::Schema::from_toml(text, origin).map_err(|e| Error::BadInput(e.to_string()))
    };
    if let Some(given) = &params.schema {
        return match parse(&given.text, &given.origin)? {
            Some(schema) => Ok(Some(schema)),
            None => Err(Error::BadInput(format!(
                "{}: has no [state] table; a schema file declares `[state]` with `version` \
                 and `[state.channels]`",
                given.origin
            ))),
        };
    }
    match grove_toml {
        Some((text, origin)) => parse(text, origin),
        None => Ok(None),
    }
}

fn validate(params: &SpawnParams) -> Result<(), Error> {
    let bad = |message: String| Err(Error::BadInput(message));
    match params.argv.first() {
        None => {
            return bad("no command given: put the agent's command after `--`, \
                 e.g. `grove spawn -- make test`"
                .into())
        }
        Some(program) if program.is_empty() => {
            return bad("the command is an empty string; give a program to run".into())
        }
        _ => {}
    }
    if let Some(i) = params.argv.iter().position(|a| a.contains('\0')) {
        return bad(format!("argument {i} of the command contains a NUL byte"));
    }
    if !params.repo.is_absolute() {
        return bad(format!(
            "repo path `{}` must be absolute",
            params.repo.display()
        ));
    }
    if let Some(name) = &params.name {
        validate_name(name)?;
    }
    crate::supervisor::environment::validate(params)?;
    crate::supervisor::environment::check_command(params)?;
    for dir in &params.sparse {
        let p = std::path::Path::new(dir);
        let escapes = dir.is_empty()
            || dir.contains('\0')
            || p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir));
        if escapes {
            return bad(format!(
                "--sparse `{dir}` must be a directory relative to the repository root"
            ));
        }
    }
    if let Some(session) = &params.session {
        crate::sessions::validate_session_name(session)?;
    }
    if params.timeout_ms == Some(0) {
        return bad("timeout must be longer than zero".into());
    }
    validate_console(params)
}

fn validate_console(params: &SpawnParams) -> Result<(), Error> {
    if params.tty && params.keep_stdin {
        return Err(Error::BadInput(
            "--stdin is for agents without a terminal; with --tty, `grove send` types into              the terminal already"
                .into(),
        ));
    }
    if params.tty_size.is_some() && !params.tty {
        return Err(Error::BadInput(
            "tty_size is given but tty is not: add --tty (or drop the size)".into(),
        ));
    }
    if let Some(size) = params.tty_size {
        if size.rows == 0 || size.cols == 0 || size.rows > 1000 || size.cols > 1000 {
            return Err(Error::BadInput(format!(
                "tty_size {}x{} is not a terminal size: give 1 to 1000 rows and columns",
                size.cols, size.rows
            )));
        }
    }
    Ok(())
}

/// The console socket lives in the agent's state directory: refuse a terminal when
/// that path would be too long to bind, rather than start an agent nobody can reach.
fn check_console_path(ctx: &Ctx, params: &SpawnParams) -> Result<(), Error> {
    if !params.tty && !params.keep_stdin {
        return Ok(());
    }
    let example = crate::console::socket_path(&ctx.config.dirs, "00000000");
    let len = example.as_os_str().len();
    if len > grove_sys::MAX_SOCKET_PATH_BYTES {
        return Err(Error::Refused(format!(
            "an agent's console socket would be {} ({len} bytes), longer than this OS allows              ({} bytes): set GROVE_HOME or XDG_STATE_HOME to a shorter path to use --tty or --stdin",
            example.display(),
            grove_sys::MAX_SOCKET_PATH_BYTES
        )));
    }
    Ok(())
}

/// The agent's input, refused whole (never cut short) when it is not base64 or too long.
fn decode_stdin(text: &str) -> Result<Vec<u8>, Error> {
    let bytes =
        grove_proto::b64::decode(text).map_err(|e| Error::BadInput(format!("stdin_b64 is {e}")))?;
    let cap = grove_proto::MAX_SPAWN_STDIN_BYTES;
    if bytes.len() > cap {
        return Err(Error::BadInput(format!(
            "the agent's input is {} bytes, over the {} KiB a spawn carries; put it in a \
             file of the repository for the agent to read instead; nothing was spawned",
            bytes.len(),
            cap >> 10
        )));
    }
    Ok(bytes)
}

/// A name becomes part of the branch `grove/<name>-<id>`, so it must be one valid
/// ref component.
fn validate_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.contains('/')
        && git2::Reference::is_valid_name(&format!("refs/heads/grove/{name}-00000000"));
    if valid {
        Ok(())
    } else {
        let name: String = name.chars().take(80).collect();
        Err(Error::BadInput(format!(
            "name `{name}` cannot be part of a branch name: use up to 64 letters, digits, \
             `-`, `_` or `.`, without `/`, spaces, `..` or a leading `.`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn names_must_be_one_ref_component() {
        for good in ["fix-tests", "a", "feature_2", "v1.2"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "has space",
            "..",
            ".hidden",
            "x..y",
            "a~b",
            "a:b",
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}

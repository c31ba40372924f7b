//! Preparing an agent: its worktree, then its shim. Runs as a task outside the core;
//! any failure rolls back completely (no worktree, no metadata, no branch).

use crate::config::Config;
use crate::error::Error;
use crate::git::lane::Lanes;
use crate::git::pool::{self, Taken};
use crate::git::target::{resolve_repo, RepoTarget};
use crate::git::worktree::Checkout;
use crate::git::{clone_checkout, own_repo, worktree};
use crate::supervisor::cli_trust;
use crate::supervisor::environment::{agent_environment, AgentIdentity};
use crate::supervisor::jail_home;
use crate::supervisor::jail_paths::{content_jail_spec, jail_spec, setup_jail_lacks};
use crate::supervisor::launch::launch;
use grove_proto::shim::{ConsoleSpec, LogSpec, ShimSpec, EXIT_RECORD_FILE};
use grove_proto::types::AgentRecord;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct PrepareJob {
    /// A warm-pool worktree to turn into the agent's, instead of checking out.
    pub pooled: Option<Taken>,
    pub record: AgentRecord,
    pub token: String,
    pub env: Vec<(String, String)>,
    pub exe: PathBuf,
    pub config: Arc<Config>,
}

/// What a successful preparation produced.
pub struct Prepared {
    pub pid: u32,
    /// Paths the setup placed in the worktree (never salvaged).
    pub placed: Vec<String>,
    /// The checkout was cloned from its base's template.
    pub cloned: bool,
}

/// Where worktrees can be cloned, a fresh checkout's base gets its template, in the
/// background: the next spawn on that base clones it instead of checking out.
fn make_template(job: &PrepareJob, target: &RepoTarget) {
    let record = &job.record;
    if !record.sparse.is_empty() || !clone_checkout::root_clones(&record.worktree) {
        return;
    }
    let Ok(base) = git2::Oid::from_str(&record.base_commit) else {
        return;
    };
    let (common, worktree) = (target.common_dir.clone(), record.worktree.clone());
    let workers = job.config.checkout_workers;
    tokio::task::spawn_blocking(move || {
        if let Err(e) = clone_checkout::build_template(&common, &worktree, base, workers) {
            tracing::warn!(error = %e, "cannot make the template for copy-on-write worktrees");
        }
    });
}

/// Creates the worktree, sets it up and starts the shim.
pub async fn prepare(lanes: Lanes, job: PrepareJob) -> Result<Prepared, Error> {
    let repo = job.record.repo.clone();
    let target = tokio::task::spawn_blocking(move || resolve_repo(&repo)).await??;
    let checkout = create_worktree(&lanes, &target, &job).await?;
    if checkout == Checkout::CheckedOut {
        make_template(&job, &target);
    }
    crate::faults::hold("prepared_worktree").await;
    let started = async {
        let placed = set_up(&job, &target.common_dir).await?;
        let pid = start_shim(&job).await?;
        Ok(Prepared {
            pid,
            placed,
            cloned: checkout == Checkout::Cloned,
        })
    };
    match started.await {
        Ok(prepared) => Ok(prepared),
        Err(e) => {
            let (path, branch) = (job.record.worktree.clone(), job.record.branch.clone());
            let _ = lanes
                .run(&target, move |lane| {
                    worktree::rollback(&lane.repo, &path, &branch);
                    Ok(())
                })
                .await;
            let ledger = cli_trust::ledger_path(&job.config.dirs.state_dir, &job.record.id);
            let _ = tokio::task::spawn_blocking(move || cli_trust::release(&ledger)).await;
            Err(e)
        }
    }
}

async fn create_worktree(
    lanes: &Lanes,
    target: &RepoTarget,
    job: &PrepareJob,
) -> Result<Checkout, Error> {
    let record = &job.record;
    let base = git2::Oid::from_str(&record.base_commit).map_err(|source| Error::BadCommitId {
        what: "base commit",
        text: record.base_commit.clone(),
        source,
    })?;
    let path = record.worktree.clone();
    let branch = record.branch.clone();
    let reason = format!("grove agent {} is using this worktree", record.id);
    let workers = job.config.checkout_workers;
    let sparse = record.sparse.clone();
    let pooled = job.pooled.clone();
    let jailed = record.jail;
    lanes
        .run(target, move |lane| {
            // A jailed agent gets a repository of its own, never a worktree of the
            // user's (whose refs, objects and logs its jail could not keep it from).
            if jailed {
                if let Some(taken) = pooled {
                    match own_repo::adopt_pooled(lane, &taken, &path, &branch, base, workers) {
                        Ok(()) => return Ok(Checkout::CheckedOut),
                        Err(e) => tracing::warn!(error = %e, "cannot use a warm-pool worktree"),
                    }
                }
                return own_repo::create(lane, &path, &branch, base, workers, &sparse);
            }
            if let Some(taken) = pooled {
                match pool::adopt(lane, &taken, &path, &branch, base, &reason, workers) {
                    Ok(()) => return Ok(Checkout::CheckedOut),
                    // The pool worktree is gone with the failure; check out afresh.
                    Err(e) => tracing::warn!(error = %e, "cannot use a warm-pool worktree"),
                }
            }
            worktree::create(lane, &path, &branch, base, &reason, workers, &sparse)
        })
        .await
}

/// Places files and runs setup commands; `users_git` is the user's repository's git
/// dir (shown read-only to jailed setup in an unjailed agent's linked worktree).
async fn set_up(job: &PrepareJob, users_git: &Path) -> Result<Vec<String>, Error> {
    let record = &job.record;
    if record.setup.is_empty() && !record.repo.join(".worktreeinclude").exists() {
        return Ok(Vec::new());
    }
    let (setup, main, worktree, log) = (
        record.setup.clone(),
        record.repo.clone(),
        record.worktree.clone(),
        record.log_path.clone(),
    );
    // Setup commands get a TMPDIR of their own: the agent's is made (and removed) by
    // its shim, which starts only after them.
    let setup_tmp = job.config.dirs.agent_dir(&record.id).join("setup-tmp");
    let foreign = foreign_base(job).await?;
    let runner = setup_runner(job, &setup_tmp, foreign, users_git).await?;
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&setup_tmp).map_err(Error::io("create", &setup_tmp))?;
        let placed = crate::worktree_setup::apply(&setup, &main, &worktree, &log, &runner);
        let _ = std::fs::remove_dir_all(&setup_tmp);
        placed
    })
    .await?
}

/// How the agent's processes run: the same for its setup commands and for the agent.
struct AsTheAgent {
    env: Vec<(String, String)>,
    jail: Option<grove_proto::shim::JailSpec>,
}

/// The environment and jail of the agent's processes, with `tmp` as their TMPDIR.
fn as_the_agent(job: &PrepareJob, tmp: &std::path::Path) -> Result<AsTheAgent, Error> {
    let record = &job.record;
    let socket = job.config.dirs.socket.display().to_string();
    let worktree = record.worktree.display().to_string();
    let identity = AgentIdentity {
        agent_id: &record.id,
        session: &record.session,
        socket: &socket,
        token: &job.token,
        worktree: &worktree,
        base: &record.base_commit,
    };
    // A private TMPDIR; the user's --env may override it.
    let mut env = vec![("TMPDIR".to_string(), tmp.display().to_string())];
    env.extend(job.env.iter().cloned());
    let jail = record
        .jail
        .then(|| jail_spec(&record.worktree, tmp, &record.jail_write))
        .transpose()?;
    Ok(AsTheAgent {
        env: agent_environment(&identity, &env),
        jail,
    })
}

/// Setup commands run as the agent will: in the same kind of jail (a view of their
/// own, with `tmp` for their TMPDIR and a private home in it) and with the same
/// environment. An unjailed agent's run jailed all the same when its base is agents'
/// content (`foreign`), which must never run as the user; their view shows the user's
/// git dir read-only (`supervisor/users_git.rs`), so that git works in the linked
/// worktree.
async fn setup_runner(
    job: &PrepareJob,
    tmp: &Path,
    foreign: Option<String>,
    users_git: &Path,
) -> Result<crate::worktree_setup::Runner, Error> {
    let AsTheAgent { env, jail } = as_the_agent(job, tmp)?;
    let record = &job.record;
    let (mut jail, jailed_for, home, shown_git) = match (jail, foreign) {
        (Some(jail), _) => (
            jail,
            "of a jailed agent".to_string(),
            record.jail_home.clone(),
            None,
        ),
        // No copy of the CLI's files into its home: nothing of the user's goes to
        // content no one reviewed.
        (None, Some(why)) => (
            content_jail_spec(&record.worktree, tmp, &record.jail_write),
            format!("on agents' content ({why})"),
            Vec::new(),
            Some(users_git),
        ),
        (None, None) => return Ok(crate::worktree_setup::Runner { jail: None, env }),
    };
    if record.setup.setup.is_empty() {
        return Ok(crate::worktree_setup::Runner { jail: None, env });
    }
    jail_can_be_had(record, &jailed_for)?;
    in_a_view(job, tmp, &env, &mut jail, home).await?;
    if let Some(common) = shown_git {
        let entries = users_git_entries(common, tmp).await?;
        jail.view.get_or_insert_with(Vec::new).extend(entries);
    }
    Ok(crate::worktree_setup::Runner {
        jail: Some(crate::worktree_setup::SetupJail {
            spec: jail,
            jailed_for,
            helper: crate::supervisor::launch::shim_program(&job.exe),
            grace: job.config.kill_grace,
        }),
        env,
    })
}

/// Refuses setup commands that must run jailed where the machine cannot jail them,
/// as a jailed spawn is refused: never run weaker.
fn jail_can_be_had(record: &AgentRecord, jailed_for: &str) -> Result<(), Error> {
    let Some(why) = setup_jail_lacks() else {
        return Ok(());
    };
    let hint = if record.jail {
        ""
    } else {
        " (to run them as you, merge the agent's branch into one of yours first)"
    };
    Err(Error::Refused(format!(
        "setup commands {jailed_for} run in a jail, and this machine cannot give one: \
         {why}; nothing was run{hint}"
    )))
}

/// The user's git dir in the view, read-only, its config reduced to a copy in `tmp`.
async fn users_git_entries(
    common: &Path,
    tmp: &Path,
) -> Result<Vec<grove_proto::shim::ViewEntry>, Error> {
    let (git, dir) = (common.to_path_buf(), tmp.to_path_buf());
    tokio::task::spawn_blocking(move || crate::supervisor::users_git::entries(&git, &dir))
        .await?
        .map_err(|source| Error::Io {
            what: "copy what git needs of your repository's config for setup",
            path: common.join("config"),
            source,
        })
}

/// Gives `jail` a jailed agent's view (`supervisor/jail_view.rs`), with its private
/// home made afresh in `tmp` holding copies of `home_entries`.
async fn in_a_view(
    job: &PrepareJob,
    tmp: &Path,
    env: &[(String, String)],
    jail: &mut grove_proto::shim::JailSpec,
    home_entries: Vec<String>,
) -> Result<(), Error> {
    use crate::supervisor::{jail_home, jail_view};
    let (record, config) = (&job.record, &job.config);
    let private_home = jail_home::path(tmp);
    let home = private_home.clone();
    tokio::task::spawn_blocking(move || {
        jail_home::make(&home, jail_home::user_home().as_deref(), &home_entries)
    })
    .await?
    .map_err(|source| Error::Io {
        what: "make the jailed agent's private home",
        path: private_home.clone(),
        source,
    })?;
    // Bound at $HOME, it is another mount of the same directory: Landlock's rule
    // for the TMPDIR does not reach it through that mount, its own rule does.
    jail.writable.push(private_home.clone());
    jail.view = Some(jail_view::view(&jail_view::ViewInputs {
        repo: &record.worktree,
        tmp_dir: tmp,
        writable: &record.jail_write,
        env,
        state_dir: &config.dirs.state_dir,
        socket: &config.dirs.socket,
        shown: &config.jail_show,
        hidden: &config.jail_hide,
        private_home: Some(&private_home),
    }));
    Ok(())
}

/// Why an unjailed agent's setup commands must run jailed: no ref of the user's
/// reaches its base, only agents' work does (git/users_refs.rs).
async fn foreign_base(job: &PrepareJob) -> Result<Option<String>, Error> {
    let record = &job.record;
    if record.jail || record.setup.setup.is_empty() {
        return Ok(None);
    }
    let (repo, base) = (record.repo.clone(), record.base_commit.clone());
    let own =
        tokio::task::spawn_blocking(move || crate::git::users_refs::is_users_own(&repo, &base))
            .await??;
    Ok((!own).then(|| {
        let short = record.base_commit.get(..12).unwrap_or(&record.base_commit);
        format!("the base {short} is on no branch or tag of yours")
    }))
}

/// The caller's directory in the agent's worktree, or the root where the checkout has
/// no such directory (sparse, untracked or ignored there), said in the agent's log.
fn start_dir(record: &AgentRecord) -> PathBuf {
    let Some(subdir) = &record.subdir else {
        return record.worktree.clone();
    };
    let wanted = record.worktree.join(subdir);
    // Canonical, so that a committed symlink cannot start the agent outside its worktree.
    let inside = match (wanted.canonicalize(), record.worktree.canonicalize()) {
        (Ok(dir), Ok(root)) => dir.is_dir() && dir.starts_with(&root),
        _ => false,
    };
    if inside {
        return wanted;
    }
    let note = format!(
        "grove: {} is not a directory of this worktree (a sparse checkout, or a directory \
         git does not track); the agent starts at the worktree's root\n",
        subdir.display()
    );
    tracing::warn!(agent = %record.id, subdir = %subdir.display(), "starting at the worktree's root");
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&record.log_path)
        .and_then(|mut log| std::io::Write::write_all(&mut log, note.as_bytes()));
    record.worktree.clone()
}

/// The agent's CLI trusts its worktree where it trusts the repository
/// (`supervisor/cli_trust`): in a jailed agent's private home, else in the user's
/// home when the agent's `HOME` is the user's.
async fn trust_worktree(job: &PrepareJob, env: &[(String, String)], tmp_dir: &std::path::Path) {
    let record = &job.record;
    let (home, ledger) = if record.jail {
        (jail_home::path(tmp_dir), None)
    } else {
        let Some(home) = jail_home::user_home() else {
            return;
        };
        let agents_home = env.iter().rev().find(|(k, _)| k == "HOME");
        if agents_home.is_some_and(|(_, v)| std::path::Path::new(v) != home) {
            return;
        }
        let ledger = cli_trust::ledger_path(&job.config.dirs.state_dir, &record.id);
        (home, Some(ledger))
    };
    let Some(program) = record.argv.first().cloned() else {
        return;
    };
    let (repo, worktree, env) = (record.repo.clone(), record.worktree.clone(), env.to_vec());
    let _ = tokio::task::spawn_blocking(move || {
        cli_trust::grant(&cli_trust::Grant {
            program: &program,
            repo: &repo,
            worktree: &worktree,
            home: &home,
            env: &env,
            ledger: ledger.as_deref(),
        })
    })
    .await;
}

async fn start_shim(job: &PrepareJob) -> Result<u32, Error> {
    let record = &job.record;
    let dirs = &job.config.dirs;
    let (claim, abandon) =
        super::lifecycle::start_markers(&dirs.agent_dir(&record.id), record.attempt);
    // The shim makes the private TMPDIR and removes it.
    let tmp_dir = dirs.agent_dir(&record.id).join("tmp");
    let AsTheAgent { env, mut jail } = as_the_agent(job, &tmp_dir)?;
    if let Some(jail) = jail.as_mut() {
        in_a_view(job, &tmp_dir, &env, jail, record.jail_home.clone()).await?;
    }
    trust_worktree(job, &env, &tmp_dir).await;
    let spec = ShimSpec {
        agent_id: record.id.clone(),
        argv: record.argv.clone(),
        env,
        limits: record.limits.clone(),
        timeout_ms: record.timeout_ms,
        grace_ms: job.config.kill_grace.as_millis() as u64,
        exit_record: dirs.agent_dir(&record.id).join(EXIT_RECORD_FILE),
        daemon_lock: Some(dirs.daemon_lock()),
        claim: Some(claim),
        abandon: Some(abandon),
        tmp_dir: Some(tmp_dir),
        jail,
        cgroup: job.config.cgroup,
        console: (record.tty.is_some() || record.keep_stdin).then(|| ConsoleSpec {
            socket: crate::console::socket_path(dirs, &record.id),
            tty: record.tty,
            waiting_after_ms: job.config.waiting_after.as_millis() as u64,
            attach_links: job.config.attach_links,
            attach_title: job.config.attach_title,
        }),
        log: Some(LogSpec {
            path: record.log_path.clone(),
            max_bytes: job.config.log_max,
        }),
        stdin: record
            .stdin_bytes
            .map(|_| dirs.agent_dir(&record.id).join(super::spawn::STDIN_FILE)),
    };
    let exe = job.exe.clone();
    let cwd = start_dir(record);
    let log = record.log_path.clone();
    let program = crate::supervisor::launch::shim_program(&exe);
    tokio::task::spawn_blocking(move || launch(&exe, &spec, &cwd, &log))
        .await?
        .map_err(|source| Error::Io {
            what: "start the agent's shim",
            path: program,
            source,
        })
}

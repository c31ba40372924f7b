//! One daemon instance: lock, database, core, socket; then serve until told to stop.

use crate::config::Config;
use crate::core::Core;
use crate::db::Db;
use crate::error::Error;
use crate::events::EventBus;
use crate::git::lane::Lanes;
use crate::janitor::Janitor;
use crate::server::{self, Ctx};
use grove_proto::now_ms;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::future::Future;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use tokio::net::UnixListener;
use tokio::sync::watch;

/// Called once the socket accepts connections.
pub type Ready = Box<dyn FnOnce() + Send>;

/// Runs the daemon until `shutdown` resolves or a client calls `daemon.stop`.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    ready: Ready,
) -> Result<(), Error> {
    let begun = std::time::Instant::now();
    crate::metrics::record::set_enabled(config.metrics);
    let dirs = config.dirs.clone();
    // Before anything is written: a socket directory someone else could write is
    // refused, whatever else lives in it.
    check_socket_dir(&dirs)?;
    make_private_dir(&dirs.state_dir)?;
    make_private_dir(&dirs.agents_dir())?;
    make_state_private(&dirs);
    // Held until the process exits, not until this function returns: the kernel drops
    // it once every thread is gone, and that is what `grove daemon stop` waits for
    // before it says "stopped".
    std::mem::forget(take_instance_lock(&dirs.daemon_lock())?);
    crate::git::take_over_git_of(&dirs.state_dir, config.cgroup);
    // The socket opens before any recovery: connections wait in its backlog for the few
    // milliseconds until the server runs, never for a rollback or a collect.
    let listener = bind(&dirs.socket)?;
    link_for_views(&dirs.socket, &dirs.state_dir)?;
    let _socket = SocketFile(dirs.socket.clone());
    let db = Db::open(&dirs.database())?;
    let pid = std::process::id();
    let start = db
        .call(move |conn| crate::db::starts::record(conn, now_ms(), pid))
        .await?;
    crate::metrics::daemon_started(start);
    let db_at_exit = db.clone();
    let config = Arc::new(config);
    let deleter = crate::git::deleter::Deleter::start().map_err(|source| Error::Os {
        what: "start the thread that deletes removed worktrees",
        source,
    })?;
    let lanes = Lanes::new(config.repo_idle_release, deleter);
    let (stop, stopped) = watch::channel(false);
    let exe = std::env::current_exe().map_err(|source| Error::Os {
        what: "find the grove executable",
        source,
    })?;
    // Says now, not at the first spawn, which shim agents will get.
    crate::supervisor::launch::shim_program(&exe);
    let damage = crate::db::mark::FoundDamage::default();
    crate::db::mark::start(
        db.clone(),
        dirs.database(),
        stopped.clone(),
        stop.clone(),
        damage.clone(),
    );
    let events = EventBus::default();
    let state = crate::sessions::start(
        db.clone(),
        events.clone(),
        config.state_limits,
        config.session_lifecycle,
        stopped.clone(),
    )
    .await?;
    // The core outlives the server by a little: on the way out it removes the warm pool.
    let (core_stop, core_stopped) = watch::channel(false);
    let core = Core::start(
        db.clone(),
        lanes.clone(),
        config.clone(),
        exe,
        state.clone(),
        events.clone(),
        core_stopped,
    )
    .await?;
    let core_at_exit = core.clone();
    let janitor = Janitor::new(
        core.clone(),
        lanes.clone(),
        db.clone(),
        config.clone(),
        events.clone(),
    );
    let records = core.clone();
    crate::sessions::gc::start(
        state.clone(),
        move || {
            let core = records.clone();
            async move { core.snapshot().await }
        },
        config.session_lifecycle,
        stopped.clone(),
    );
    if let Some(notify) = config.notify.clone() {
        crate::notify::start(notify, &events, stopped.clone());
    }
    let janitor = janitor.start(stopped);
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(crate::server::metrics::http::bind(addr).await?),
        None => None,
    };
    let ctx = Arc::new(Ctx {
        core,
        janitor,
        state,
        events,
        db,
        lanes,
        config: config.clone(),
        started_at_ms: now_ms(),
        stop: stop.clone(),
        connections: server::ConnectionSlots::new(config.max_connections),
        agent_connections: server::AgentSlots::new(
            config.agent_max_connections,
            server::Budget::Agent,
        ),
        tree_connections: server::AgentSlots::new(
            config.tree_max_connections,
            server::Budget::Tree,
        ),
        idempotency: Default::default(),
        live_diffs: Default::default(),
        checkpoint_locks: Default::default(),
    });
    let slo_window_ms = ctx.config.slo.window.as_millis() as u64;
    crate::server::metrics::slo::start(ctx.clone());
    if let Some(listener) = metrics_listener {
        tracing::info!(address = ?listener.local_addr().ok(), "serving metrics at /metrics");
        crate::server::metrics::http::serve(listener, ctx.clone());
    }
    tracing::info!(socket = %dirs.socket.display(), pid = std::process::id(), "grove daemon ready");
    ready();
    crate::metrics::daemon_ready(begun);
    let serving = server::serve(listener, ctx);
    tokio::pin!(serving);
    tokio::select! {
        () = &mut serving => {}
        () = shutdown => {
            let _ = stop.send(true);
            serving.await;
        }
    }
    let _ = stop.send(true);
    crate::metrics::window::keep(&dirs.state_dir, slo_window_ms);
    // The warm pool is removed if that is quick. Bounded: a stop returns within
    // seconds whatever the repository's size, and what is left (a pool worktree, files
    // set aside to be deleted) is recognisable by its name and the next start's work.
    let drained = tokio::time::timeout(POOL_DRAIN_AT_STOP, core_at_exit.drain_pool(true));
    if drained.await.is_err() {
        tracing::info!(
            "the warm pool was not removed within {}ms; the next daemon will",
            POOL_DRAIN_AT_STOP.as_millis()
        );
    }
    let _ = core_stop.send(true);
    if let Some(report) = damage.get() {
        // Nothing more is written to a damaged store: no clean stop, no seal.
        return Err(Error::Db(crate::db::DbError::Damaged(format!(
            "{report} Found while the daemon ran, which stopped so as not to serve from \
             it; {}.",
            crate::db::health::RECOVER_ADVICE
        ))));
    }
    record_clean_stop(&db_at_exit, start.seq, dirs.database()).await;
    tracing::info!("grove daemon stopped");
    Ok(())
}

/// Records the clean stop, then seals the database file for the next start.
async fn record_clean_stop(db: &Db, seq: i64, path: std::path::PathBuf) {
    if let Err(e) = db
        .call(move |conn| crate::db::starts::stopped(conn, seq, now_ms()))
        .await
    {
        tracing::warn!(error = %e, "cannot record the clean stop; the next start counts it as a crash");
        return;
    }
    let sealed = db.call(move |conn| {
        crate::db::seal::seal(conn, &path);
        Ok(())
    });
    let _ = sealed.await;
}

/// How long a stop gives the warm pool's removal.
const POOL_DRAIN_AT_STOP: std::time::Duration = std::time::Duration::from_secs(1);

/// The socket file, removed when the daemon stops or fails to start (while it still
/// holds the instance lock, so it never removes a successor's socket).
struct SocketFile(std::path::PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Refuses to serve from a socket directory that another user owns or may write
/// (see [`grove_proto::paths::secure_socket_dir`]).
pub fn check_socket_dir(dirs: &grove_proto::paths::Dirs) -> Result<(), Error> {
    grove_proto::paths::secure_socket_dir(dirs.socket_dir())
        .map(|_| ())
        .map_err(|e| Error::Refused(e.to_string()))
}

/// Creates `path` 0700, and makes it 0700 when it already existed with a looser mode.
fn make_private_dir(path: &Path) -> Result<(), Error> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| Error::Io {
            what: "create",
            path: path.to_path_buf(),
            source,
        })?;
    restrict(path, 0o700);
    Ok(())
}

/// The state directory holds secrets (the database with queued agents' environments,
/// tokens, logs): a directory that existed before grove, or files another program made
/// there, may be readable by others. Directly inside it, directories become 0700 and
/// files 0600; deeper entries are behind a 0700 directory. Symlinks are left alone.
fn make_state_private(dirs: &grove_proto::paths::Dirs) {
    let Ok(entries) = fs::read_dir(&dirs.state_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            restrict(&entry.path(), 0o700);
        } else if kind.is_file() {
            restrict(&entry.path(), 0o600);
        }
    }
}

/// Sets `mode` on `path` unless it has no more than that already (never follows a
/// symlink: `path` was found not to be one, and a swapped one is skipped by `lstat`).
fn restrict(path: &Path, mode: u32) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    let current = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() || current & !mode == 0 {
        return;
    }
    match fs::set_permissions(path, fs::Permissions::from_mode(current & mode)) {
        Ok(()) => {
            tracing::info!(path = %path.display(), from = format!("{current:o}"), "made private")
        }
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot make private"),
    }
}

/// Holds the daemon lock for the life of the process: one daemon per GROVE_HOME.
fn take_instance_lock(path: &Path) -> Result<Flock<File>, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| Error::Io {
            what: "open",
            path: path.to_path_buf(),
            source,
        })?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, _)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(Error::InvalidState(format!(
                "another grove daemon (pid {}) already runs with state in {}; \
                 stop it with `grove daemon stop`",
                pid.trim(),
                path.parent().unwrap_or(path).display()
            )));
        }
    };
    let _ = lock.set_len(0);
    let _ = lock.rewind();
    let _ = write!(lock, "{}", std::process::id());
    let _ = lock.sync_all();
    Ok(lock)
}

/// Links the socket into the directory that jailed agents' views show in place of the
/// state directory (`supervisor::jail_view`): replaced atomically at every start, so
/// that an agent that outlived a daemon reaches the new one.
fn link_for_views(socket: &Path, state_dir: &Path) -> Result<(), Error> {
    let dir = crate::supervisor::jail_view::socket_dir(state_dir);
    make_private_dir(&dir)?;
    let link = dir.join(crate::supervisor::jail_view::SOCKET_LINK);
    let fresh = dir.join(format!(".{}.new", std::process::id()));
    let _ = fs::remove_file(&fresh);
    fs::hard_link(socket, &fresh)
        .and_then(|()| fs::rename(&fresh, &link))
        .map_err(|source| Error::Io {
            what: "link the socket for jailed agents into",
            path: dir,
            source,
        })
}

/// Binds the socket in a 0700 directory and makes it 0600. We hold the instance lock, so
/// a socket file already there is a dead daemon's and can go.
fn bind(socket: &Path) -> Result<UnixListener, Error> {
    if let Some(dir) = socket.parent() {
        make_private_dir(dir)?;
        grove_proto::paths::secure_socket_dir(dir).map_err(|e| Error::Refused(e.to_string()))?;
    }
    match fs::remove_file(socket) {
        Ok(()) => tracing::info!(socket = %socket.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::Io {
                what: "remove the stale socket",
                path: socket.to_path_buf(),
                source,
            })
        }
    }
    let listener = UnixListener::bind(socket).map_err(|source| Error::Io {
        what: "listen on",
        path: socket.to_path_buf(),
        source,
    })?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600)).map_err(|source| Error::Io {
        what: "restrict",
        path: socket.to_path_buf(),
        source,
    })?;
    Ok(listener)
}

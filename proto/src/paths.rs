//! Where grove keeps things. `GROVE_HOME` overrides everything; otherwise XDG.

use std::env;
use std::path::{Path, PathBuf};

/// Longest socket path this OS takes (107 bytes on Linux, 103 on macOS and the BSDs).
pub const MAX_SOCKET_PATH_BYTES: usize = grove_sys::MAX_SOCKET_PATH_BYTES;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// Database, agent logs and exit records, the daemon's log and lock.
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// The one root under which every grove worktree lives.
    pub worktree_root: PathBuf,
    pub config_file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("cannot find a home for grove: set GROVE_HOME or HOME")]
    NoHome,
    #[error(
        "socket path {path} is {len} bytes, over the {max}-byte limit of Unix sockets; \
         set GROVE_HOME to a shorter directory"
    )]
    SocketPathTooLong {
        path: String,
        len: usize,
        max: usize,
    },
    /// The directory of the socket could let someone else answer in grove's place.
    #[error("{0}")]
    UnsafeSocketDir(String),
}

fn var_path(name: &str) -> Option<PathBuf> {
    env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .map(absolute)
}

fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        env::current_dir()
            .map(|cwd| cwd.join(&path))
            .unwrap_or(path)
    }
}

impl Dirs {
    /// Resolves the directories from the environment of this process.
    pub fn from_env() -> Result<Dirs, PathError> {
        let dirs = match var_path("GROVE_HOME") {
            Some(home) => Dirs {
                socket: home.join("grove.sock"),
                worktree_root: home.join("worktrees"),
                config_file: home.join("config.toml"),
                state_dir: home,
            },
            None => Self::from_xdg()?,
        };
        let dirs = Dirs {
            worktree_root: var_path("GROVE_WORKTREE_ROOT").unwrap_or(dirs.worktree_root),
            ..dirs
        };
        check_socket_path(&dirs.socket)?;
        Ok(dirs)
    }

    fn from_xdg() -> Result<Dirs, PathError> {
        let home = var_path("HOME").ok_or(PathError::NoHome)?;
        let state_dir = var_path("XDG_STATE_HOME")
            .unwrap_or_else(|| home.join(".local/state"))
            .join("grove");
        let data_dir = var_path("XDG_DATA_HOME")
            .unwrap_or_else(|| home.join(".local/share"))
            .join("grove");
        let config_dir = var_path("XDG_CONFIG_HOME")
            .unwrap_or_else(|| home.join(".config"))
            .join("grove");
        let socket = socket_for_state_dir(&state_dir);
        Ok(Dirs {
            socket,
            worktree_root: data_dir.join("worktrees"),
            config_file: config_dir.join("config.toml"),
            state_dir,
        })
    }

    pub fn agents_dir(&self) -> PathBuf {
        self.state_dir.join("agents")
    }

    pub fn agent_dir(&self, id: &str) -> PathBuf {
        self.agents_dir().join(id)
    }

    pub fn database(&self) -> PathBuf {
        self.state_dir.join("grove.db")
    }

    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("daemon.log")
    }

    /// Held (flock) by the running daemon for its whole life.
    pub fn daemon_lock(&self) -> PathBuf {
        self.state_dir.join("daemon.lock")
    }

    /// Held by a client while it starts the daemon, so racing clients start only one.
    pub fn start_lock(&self) -> PathBuf {
        self.state_dir.join("start.lock")
    }
}

/// The socket of the daemon that keeps its state in `state_dir`. It depends on nothing
/// but the state directory and the uid, so that every command of the user reaches the
/// same daemon whatever its environment: MCP hosts start `grove mcp` with a reduced
/// one (no `XDG_RUNTIME_DIR`, say), and a socket chosen from such variables led to a
/// second daemon that the first one's lock refused.
pub fn socket_for_state_dir(state_dir: &Path) -> PathBuf {
    let socket = state_dir.join("grove.sock");
    if socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        return socket;
    }
    // A deep home: a short per-user directory, one socket per state directory in it.
    let uid = nix::unistd::geteuid().as_raw();
    PathBuf::from(format!("/tmp/grove-{uid}")).join(format!(
        "{:016x}.sock",
        fnv1a(state_dir.as_os_str().as_encoded_bytes())
    ))
}

/// A stable name, not a secret: who may use the directory is checked by
/// `secure_socket_dir`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub fn check_socket_path(path: &Path) -> Result<(), PathError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(PathError::SocketPathTooLong {
            path: path.display().to_string(),
            len,
            max: MAX_SOCKET_PATH_BYTES,
        });
    }
    Ok(())
}

/// Makes sure that nobody but this user can put or replace a socket in `dir`, the
/// directory of grove's socket: it must be a real directory (no symlink), owned by this
/// user, and writable by nobody else. A directory that passes but is readable by others
/// is tightened to 0700 (nobody else could have placed anything in it). `Ok(false)`:
/// the directory does not exist yet.
///
/// Checked through a descriptor opened without following symlinks, so that the
/// directory checked and the one tightened are the same.
pub fn secure_socket_dir(dir: &Path) -> Result<bool, PathError> {
    use nix::errno::Errno;
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fchmod, fstat, Mode};
    let shown = dir.display();
    let unsafe_dir = |what: String| Err(PathError::UnsafeSocketDir(what));
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let fd = match open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(false),
        Err(Errno::ELOOP | Errno::ENOTDIR) if is_symlink(dir) => {
            return unsafe_dir(format!(
                "the socket directory {shown} is a symbolic link, which could lead anywhere: \
                 remove it (grove makes a private one) or set GROVE_HOME to a directory of yours"
            ))
        }
        Err(Errno::ENOTDIR) => {
            return unsafe_dir(format!(
                "the socket directory {shown} is not a directory: remove it or set GROVE_HOME \
                 to a directory of yours"
            ))
        }
        Err(e) => {
            return unsafe_dir(format!("cannot open the socket directory {shown}: {e}"));
        }
    };
    let stat =
        fstat(&fd).map_err(|e| PathError::UnsafeSocketDir(format!("cannot stat {shown}: {e}")))?;
    let me = nix::unistd::geteuid().as_raw();
    if stat.st_uid != me {
        return unsafe_dir(format!(
            "the socket directory {shown} belongs to uid {}, not to you (uid {me}): whoever \
             owns it could answer in grove's place and read what you send; remove it or set \
             GROVE_HOME to a directory of yours",
            stat.st_uid
        ));
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return unsafe_dir(format!(
            "the socket directory {shown} has mode {mode:04o}: others may write there and \
             could put their own socket in grove's place; run `chmod 700 {shown}`"
        ));
    }
    if mode & 0o077 != 0 {
        fchmod(&fd, Mode::from_bits_truncate(0o700)).map_err(|e| {
            PathError::UnsafeSocketDir(format!(
                "the socket directory {shown} has mode {mode:04o} and cannot be made 0700 \
                 ({e}); run `chmod 700 {shown}`"
            ))
        })?;
    }
    Ok(true)
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

impl Dirs {
    /// The directory that holds the socket.
    pub fn socket_dir(&self) -> &Path {
        self.socket.parent().unwrap_or(Path::new("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_socket_path_is_refused_with_the_limit() {
        let long = PathBuf::from(format!("/{}", "x".repeat(200)));
        let err = check_socket_path(&long).expect_err("too long");
        assert!(err.to_string().contains("107-byte limit"), "{err}");
        assert!(check_socket_path(Path::new("/tmp/g/grove.sock")).is_ok());
    }

    #[test]
    fn the_socket_follows_the_state_dir_and_a_long_one_gets_a_short_socket() {
        let short = Path::new("/home/u/.local/state/grove");
        assert_eq!(socket_for_state_dir(short), short.join("grove.sock"));
        let deep = PathBuf::from(format!("/home/{}/.local/state/grove", "d".repeat(100)));
        let socket = socket_for_state_dir(&deep);
        assert!(check_socket_path(&socket).is_ok(), "{}", socket.display());
        assert_eq!(socket, socket_for_state_dir(&deep), "stable");
        let other = PathBuf::from(format!("/home/{}/.local/state/grove", "e".repeat(100)));
        assert_ne!(socket, socket_for_state_dir(&other));
    }

    #[test]
    fn a_socket_dir_others_may_write_or_a_symlink_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = secure_socket_dir(&open).expect_err("0777");
        assert!(err.to_string().contains("chmod 700"), "{err}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).expect("symlink");
        let err = secure_socket_dir(&link).expect_err("symlink");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!secure_socket_dir(&dir.path().join("none")).expect("missing"));
        let readable = dir.path().join("readable");
        std::fs::create_dir(&readable).expect("mkdir");
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(secure_socket_dir(&readable).expect("tightened"));
        let mode = std::fs::metadata(&readable)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

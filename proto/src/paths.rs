//! Where grove keeps things. `GROVE_HOME` overrides everything; otherwise XDG.

use std::env;
use std::path::{Path, PathBuf};

/// Longest socket path the kernel takes: `sun_path` is 108 bytes with its NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

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
         set GROVE_HOME (or XDG_RUNTIME_DIR) to a shorter directory"
    )]
    SocketPathTooLong {
        path: String,
        len: usize,
        max: usize,
    },
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
        let socket = match var_path("XDG_RUNTIME_DIR") {
            Some(runtime) => runtime.join("grove").join("grove.sock"),
            None => state_dir.join("grove.sock"),
        };
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
}

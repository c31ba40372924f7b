//! What a jailed agent sees of the machine (its view: `grove_sys::view`), and so its
//! setup commands and any run on agents' content (`core/prepare.rs`).
//!
//! Only what is listed here exists for it; everything else is not hidden by a rule
//! the agent could find a way around, it is simply absent from its mount namespace:
//!
//! | shown | how |
//! |---|---|
//! | the system (`/usr`, `/etc`, `/opt`, `/var`, `/sys`, the root's links) | read-only |
//! | `/dev` | as it is; Landlock lets it write only the usual sinks |
//! | `/proc` | its own pid namespace's: its own processes only |
//! | its repository, its TMPDIR, `--jail-write` and `jail_write` paths | writable |
//! | the user's objects its repository borrows (alternates, and theirs, as git follows them) | read-only |
//! | the `PATH` it was given, grove's own binary | read-only |
//! | toolchains and shell settings in `$HOME` ([`HOME_SHOWN`]), `jail_show` | read-only |
//! | `$HOME` | its private home (`jail_home.rs`): a writable copy of what its preset's CLI keeps there |
//! | `/tmp` | its TMPDIR again (codex, for one, makes its socket directory in `/tmp` whatever `TMPDIR` says) |
//! | `/var/tmp`, `/run`, `/dev/shm` (and `$HOME` without a private home) | empty, and not writable (its TMPDIR is its own) |
//! | grove's socket | the one socket of the state directory, through a link |
//!
//! Hidden even inside a shown directory: [`HOME_HIDDEN`] (keys, tokens, browser
//! profiles), grove's state directory, and `jail_hide`.
//!
//! Why a Unix socket of the user's cannot be reached: connecting needs its path, and
//! no path outside the view exists (tmux's and ssh-agent's under `/tmp`, D-Bus's and
//! systemd's under `/run/user`, docker's under `/run`, any under `$HOME`). Abstract
//! sockets have no path: Landlock's abstract-socket scope refuses those.

use std::path::{Path, PathBuf};

use grove_proto::shim::ViewEntry;

/// The system, read-only (a path missing here is left out).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/var", "/nix",
    "/snap", "/sys",
];

/// Empty in the view (and not writable: the agent's TMPDIR is its own directory).
const SCRATCH: &[&str] = &["/var/tmp", "/run", "/dev/shm"];

/// Where programs put temporary files whatever `TMPDIR` says: the agent's TMPDIR is
/// shown there too (never the user's `/tmp`). Landlock's rule for the TMPDIR holds
/// there: the mount's root is the TMPDIR itself.
const TMP: &str = "/tmp";

/// What an agent needs of `$HOME` to build and run: toolchains and shell settings.
pub const HOME_SHOWN: &[&str] = &[
    ".cargo",
    ".rustup",
    ".local/bin",
    ".local/lib",
    ".npm",
    ".nvm",
    ".pyenv",
    ".volta",
    ".bun",
    ".deno",
    "go",
    ".gitconfig",
    ".config/git",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".inputrc",
];

/// Secrets of `$HOME`, hidden even where a shown path holds them (and never copied
/// into an agent's private home).
pub const HOME_HIDDEN: &[&str] = crate::presets::HOME_SECRETS;

/// What the view is made of, from the daemon's settings and the agent's spawn.
pub struct ViewInputs<'a> {
    /// The agent's own repository (its worktree).
    pub repo: &'a Path,
    /// Its private TMPDIR.
    pub tmp_dir: &'a Path,
    /// Its extra writable paths.
    pub writable: &'a [PathBuf],
    /// The environment it runs with (`HOME`, `PATH`).
    pub env: &'a [(String, String)],
    pub state_dir: &'a Path,
    pub socket: &'a Path,
    pub shown: &'a [PathBuf],
    pub hidden: &'a [PathBuf],
    /// The directory shown, writable, at `HOME` (the toolchains of `$HOME` stay
    /// shown over it at their own places, so that `~/.cargo` and the like still work).
    pub private_home: Option<&'a Path>,
}

/// The directory of the state directory that holds only a link to the socket: a view
/// shows this directory (a restarted daemon's new socket appears in it), never the
/// state directory.
pub fn socket_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("jail-socket")
}

/// The view of one jailed agent.
pub fn view(inputs: &ViewInputs<'_>) -> Vec<ViewEntry> {
    let var = |name: &str| {
        inputs
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let home = var("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h != Path::new("/"));
    let mut hidden: Vec<PathBuf> = inputs.hidden.to_vec();
    hidden.push(inputs.state_dir.to_path_buf());
    let mut read_only: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
    // The account's own home too, where it is not `HOME`: a toolchain installed there
    // (pyenv's shims on PATH, say) runs programs from it.
    let mut homes: Vec<PathBuf> = home.iter().cloned().chain(account_home()).collect();
    homes.dedup();
    for home in &homes {
        read_only.extend(HOME_SHOWN.iter().map(|p| home.join(p)));
        hidden.extend(HOME_HIDDEN.iter().map(|p| home.join(p)));
    }
    read_only.extend(alternates(inputs.repo));
    // A home on PATH would show it whole: its toolchains are shown above instead.
    read_only.extend(
        var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute() && !homes.contains(dir) && dir != Path::new("/")),
    );
    read_only.extend(std::env::current_exe().ok());
    read_only.extend(inputs.shown.iter().cloned());
    read_only.retain(|path| !hidden.iter().any(|h| path.starts_with(h)));
    let writable: Vec<PathBuf> = [inputs.repo, inputs.tmp_dir]
        .into_iter()
        .map(Path::to_path_buf)
        .chain(inputs.writable.iter().cloned())
        .collect();

    let mut entries = Vec::new();
    let mut covered: Vec<PathBuf> = writable.clone();
    for path in read_only {
        // Once is enough: a path below one already shown (`/usr/local/bin` on PATH)
        // is in the view with it, and must not turn a writable one read-only.
        if covered.iter().any(|c| path.starts_with(c)) {
            continue;
        }
        covered.push(path.clone());
        entries.push(show(path, false));
    }
    entries.push(show(PathBuf::from("/dev"), true));
    entries.push(ViewEntry::Bind {
        source: inputs.tmp_dir.to_path_buf(),
        path: PathBuf::from(TMP),
    });
    for path in SCRATCH.iter().map(PathBuf::from).chain(homes) {
        match inputs.private_home {
            Some(source) if Some(&path) == home.as_ref() => entries.push(ViewEntry::Bind {
                source: source.to_path_buf(),
                path,
            }),
            _ => entries.push(ViewEntry::Scratch { path }),
        }
    }
    for path in writable {
        entries.push(show(path, true));
    }
    entries.extend(socket_entries(inputs));
    entries.extend(resolver_entries());
    // Masks last, and only where something shown would show them.
    let shown: Vec<PathBuf> = entries
        .iter()
        .filter_map(|e| match e {
            ViewEntry::Show { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    for path in hidden {
        let exists = path.symlink_metadata().is_ok();
        let listed = entries.iter().any(|e| e.path() == path);
        if exists && !listed && shown.iter().any(|s| path.starts_with(s) && &path != s) {
            entries.push(ViewEntry::Scratch { path });
        }
    }
    entries
}

/// The home directory of the daemon's user in the password database, looked up once.
fn account_home() -> Option<PathBuf> {
    static HOME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|user| user.dir)
            .filter(|dir| dir.is_absolute() && dir != Path::new("/"))
    })
    .clone()
}

fn show(path: PathBuf, writable: bool) -> ViewEntry {
    // A link at the root (`/bin` -> `usr/bin` on merged-usr systems) stays a link.
    if path.parent() == Some(Path::new("/")) {
        if let Ok(target) = std::fs::read_link(&path) {
            return ViewEntry::Link { path, target };
        }
    }
    ViewEntry::Show { path, writable }
}

/// The object directories the agent's repository borrows.
fn alternates(repo: &Path) -> Vec<PathBuf> {
    borrowed_objects(&repo.join(".git/objects"))
}

/// The object directories `objects` borrows (`info/alternates`: absolute, or relative
/// to the directory that names them), and those they borrow in turn, as git follows
/// them (to a depth of 5).
pub fn borrowed_objects(objects: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut level = vec![objects.to_path_buf()];
    for _ in 0..5 {
        let mut next = Vec::new();
        for dir in &level {
            for line in std::fs::read_to_string(dir.join("info/alternates"))
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
            {
                let path = lexical(&dir.join(line));
                if path != objects && !found.contains(&path) {
                    found.push(path.clone());
                    next.push(path);
                }
            }
        }
        level = next;
    }
    found
}

/// `path` with its `..` taken off lexically: the view places a path where it is read.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The state directory is hidden; its socket is reached through a link into the
/// directory that holds only the daemon's link to it.
fn socket_entries(inputs: &ViewInputs<'_>) -> Vec<ViewEntry> {
    let mut entries = vec![ViewEntry::Scratch {
        path: inputs.state_dir.to_path_buf(),
    }];
    if let Some(parent) = inputs.socket.parent() {
        if parent != inputs.state_dir {
            entries.push(ViewEntry::Scratch {
                path: parent.to_path_buf(),
            });
        }
    }
    let links = socket_dir(inputs.state_dir);
    entries.push(ViewEntry::Link {
        path: inputs.socket.to_path_buf(),
        target: links.join(SOCKET_LINK),
    });
    entries.push(ViewEntry::Show {
        path: links,
        writable: false,
    });
    entries
}

/// The name of the link in [`socket_dir`].
pub const SOCKET_LINK: &str = "grove.sock";

/// `/etc/resolv.conf` often links into `/run`, which the view replaces: its target
/// is shown, so that names still resolve.
fn resolver_entries() -> Vec<ViewEntry> {
    let resolv = Path::new("/etc/resolv.conf");
    match resolv.canonicalize() {
        Ok(target) if target.starts_with("/run") => vec![ViewEntry::Show {
            path: target,
            writable: false,
        }],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(env: &[(String, String)]) -> ViewInputs<'_> {
        ViewInputs {
            repo: Path::new("/w/repo"),
            tmp_dir: Path::new("/s/agents/a/tmp"),
            writable: &[],
            env,
            state_dir: Path::new("/s"),
            socket: Path::new("/s/grove.sock"),
            shown: &[],
            hidden: &[],
            private_home: None,
        }
    }

    #[test]
    fn a_private_home_takes_the_place_of_home_under_its_toolchains() {
        let env = vec![("HOME".to_string(), "/home/u".to_string())];
        let mut inputs = inputs(&env);
        inputs.private_home = Some(Path::new("/s/agents/a/tmp/home"));
        let entries = view(&inputs);
        assert!(entries.contains(&ViewEntry::Bind {
            source: "/s/agents/a/tmp/home".into(),
            path: "/home/u".into(),
        }));
        assert!(!entries.contains(&ViewEntry::Scratch {
            path: "/home/u".into(),
        }));
        assert!(entries.contains(&ViewEntry::Show {
            path: "/home/u/.cargo".into(),
            writable: false
        }));
    }

    #[test]
    fn home_is_private_its_secrets_hidden_and_the_socket_linked() {
        let env = vec![
            ("HOME".to_string(), "/home/u".to_string()),
            (
                "PATH".to_string(),
                "/home/u:/home/u/.ssh/bin:/usr/bin".to_string(),
            ),
        ];
        let entries = view(&inputs(&env));
        assert!(entries.contains(&ViewEntry::Scratch {
            path: "/home/u".into(),
        }));
        assert!(entries.contains(&ViewEntry::Show {
            path: "/home/u/.cargo".into(),
            writable: false
        }));
        assert!(entries.contains(&ViewEntry::Scratch { path: "/s".into() }));
        assert!(entries.contains(&ViewEntry::Link {
            path: "/s/grove.sock".into(),
            target: "/s/jail-socket/grove.sock".into()
        }));
        let shown = |p: &str| {
            entries
                .iter()
                .any(|e| matches!(e, ViewEntry::Show { path, .. } if path == Path::new(p)))
        };
        assert!(!shown("/home/u"), "HOME on PATH is not shown whole");
        assert!(!shown("/home/u/.ssh/bin"), "a PATH entry inside a secret");
        assert!(shown("/w/repo") && shown("/s/agents/a/tmp"));
    }

    #[test]
    fn borrowed_objects_are_followed_as_git_follows_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = |name: &str| dir.path().join(name).join("objects");
        for name in ["own", "user", "origin"] {
            std::fs::create_dir_all(objects(name).join("info")).expect("mkdir");
        }
        let alternates = |name: &str, text: String| {
            std::fs::write(objects(name).join("info/alternates"), text).expect("write")
        };
        alternates("own", format!("{}\n", objects("user").display()));
        alternates("user", "# shared\n../../origin/objects\n".into());
        alternates("origin", format!("{}\n", objects("own").display()));
        assert_eq!(
            borrowed_objects(&objects("own")),
            vec![objects("user"), objects("origin")]
        );
    }

    #[test]
    fn a_secret_inside_a_shown_directory_is_masked() {
        let home = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(home.path().join(".config/gh")).expect("mkdir");
        let env = vec![("HOME".to_string(), home.path().display().to_string())];
        let mut inputs = inputs(&env);
        let shown = [home.path().join(".config")];
        inputs.shown = &shown;
        let entries = view(&inputs);
        assert!(entries.contains(&ViewEntry::Scratch {
            path: home.path().join(".config/gh"),
        }));
        assert!(!entries.iter().any(|e| e.path() == home.path().join(".ssh")));
    }
}

//! Turning the path a user gave into the repository grove works on.

use crate::error::Error;
use crate::ids::stable_hash;
use git2::Repository;
use std::path::{Path, PathBuf};

/// A repository grove can spawn agents in.
#[derive(Debug, Clone)]
pub struct RepoTarget {
    /// The repository's common git dir, canonical: the key of its lane.
    pub common_dir: PathBuf,
    /// The main worktree.
    pub workdir: PathBuf,
    /// `<repo-name>-<hash6>`: this repository's directory under the worktree root.
    pub dir_name: String,
    /// The git dir of the worktree the caller stands in (the main one or a linked one):
    /// its HEAD is the default base.
    pub caller_git_dir: PathBuf,
}

pub fn resolve_repo(path: &Path) -> Result<RepoTarget, Error> {
    if !path.exists() {
        return Err(Error::BadInput(format!(
            "{} does not exist; run grove inside a git repository or pass --repo PATH",
            path.display()
        )));
    }
    let repo = Repository::discover(path).map_err(|_| {
        Error::BadInput(format!(
            "{} is not inside a git repository; run grove inside one or pass --repo PATH",
            path.display()
        ))
    })?;
    let common_dir = repo.commondir().to_path_buf();
    let caller_git_dir = repo.path().to_path_buf();
    let main = if repo.is_worktree() {
        Repository::open(&common_dir).map_err(|e| {
            Error::Git(format!(
                "cannot open the main repository {}: {}",
                common_dir.display(),
                e.message()
            ))
        })?
    } else {
        repo
    };
    let Some(workdir) = main
        .workdir()
        .map(Path::to_path_buf)
        .filter(|_| !main.is_bare())
    else {
        return Err(Error::BadInput(format!(
            "{} is a bare repository; grove needs a repository with a working tree",
            common_dir.display()
        )));
    };
    let common_dir = common_dir.canonicalize().unwrap_or(common_dir);
    let workdir = workdir.canonicalize().unwrap_or(workdir);
    let dir_name = repo_dir_name(&workdir, &common_dir);
    Ok(RepoTarget {
        common_dir,
        workdir,
        dir_name,
        caller_git_dir,
    })
}

/// Where `path` lies below the top of the worktree it is in (the main one or a linked
/// one): the agent starts in the same place in its own worktree. `None` at the top, or
/// when `path` is in no worktree.
pub fn caller_subdir(path: &Path) -> Option<PathBuf> {
    let repo = Repository::discover(path).ok()?;
    let top = repo.workdir()?.canonicalize().ok()?;
    let here = path.canonicalize().ok()?;
    let below = here.strip_prefix(&top).ok()?;
    (!below.as_os_str().is_empty()).then(|| below.to_path_buf())
}

fn repo_dir_name(workdir: &Path, common_dir: &Path) -> String {
    let base: String = workdir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = stable_hash(common_dir.as_os_str().as_encoded_bytes());
    format!("{base}-{:06x}", hash & 0xff_ffff)
}

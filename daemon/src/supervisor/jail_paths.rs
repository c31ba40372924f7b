//! What a jailed agent may write, and whether this kernel can jail at all.
//!
//! Reads stay open everywhere; writes (including create, remove, rename, truncate and
//! device ioctls) are allowed only beneath these paths:
//!
//! | path | why |
//! |---|---|
//! | the worktree | the agent's work |
//! | `<state>/agents/<id>/tmp` | its private TMPDIR, removed when the agent ends |
//! | `<common>/worktrees/<name>` | the worktree's admin dir (from the worktree's `.git` file): `index` and `index.lock`, `HEAD` and `HEAD.lock`, `logs/HEAD`, `COMMIT_EDITMSG`, `ORIG_HEAD`, `FETCH_HEAD`, `AUTO_MERGE`, `MERGE_*`, rebase state |
//! | `<common>/objects` | new objects (`objects/xx/tmp_obj_*`, linked into place), packs, `maintenance.lock` |
//! | `<common>/refs` | the branch update: `refs/heads/grove/<id>.lock`, renamed onto the ref |
//! | `<common>/logs` | the branch's reflog, `logs/refs/heads/grove/<id>` |
//! | `<common>/reftable` | the refs of a repository in the reftable format (when it is one) |
//! | `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom`, `/dev/tty` | writing to the usual sinks (`> /dev/null` opens with O_TRUNC) |
//! | `--jail-write` paths and the `jail_write` setting | whatever else the user allows (a shared build cache, say) |
//!
//! Measured with `strace -f` around `git add && git commit` in a worktree (git 2.47):
//! those are the only places git writes, plus one more: after the commit git deletes the
//! `AUTO_MERGE` pseudo-ref, and the files backend takes `<common>/packed-refs.lock` for
//! any ref deletion. Creating that lock needs write access to `<common>` itself, which
//! would also open `<common>/config` and `<common>/hooks` (code the user's own git runs
//! later: a way out of the jail), so it stays closed. git treats the failed cleanup
//! as best effort: it prints `error: Unable to create '.../packed-refs.lock':
//! Permission denied`, and the commit succeeds (the isolation tests check that). The same
//! holds for everything else directly in `<common>`: `packed-refs` (`git pack-refs`,
//! deleting a packed branch), `config`/`config.lock` (`git config`, `git branch -u`),
//! `gc.pid`/`gc.log` (`git gc`), `<common>/index` (the main checkout's index) and
//! `FETCH_HEAD` of the main checkout: none of them is needed to commit in a worktree.
//!
//! What the jail does not protect: the repository's shared git data. A jailed agent
//! may rewrite any ref under `refs/` (other branches included) and write or delete
//! files under `objects/`, because committing needs exactly those rights and Landlock
//! rules are per directory tree. It protects the main checkout's files and everything
//! outside the repository.
//!
//! Left closed on purpose: `/dev/pts` and `/dev/ptmx` (new pseudo-terminals), because
//! write and ioctl access there reaches every terminal of the machine (TIOCSTI types
//! into the user's shell); `/dev/shm`, shared with every other process; `/tmp`
//! (TMPDIR points elsewhere). `--jail-write` opens any of them when an agent needs it.

use crate::error::Error;
use grove_agent_shim::jail::{describe_abi, kernel_abi, REQUIRED_ABI};
use grove_agent_shim::JailSpec;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Devices a jailed agent may write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The kernel's Landlock ABI, probed once. `GROVE_TEST_LANDLOCK_ABI` stands in for the
/// kernel's answer, so that tests can see how an older kernel is treated.
pub fn landlock_abi() -> i32 {
    static ABI: OnceLock<i32> = OnceLock::new();
    *ABI.get_or_init(|| {
        std::env::var("GROVE_TEST_LANDLOCK_ABI")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(kernel_abi)
    })
}

/// Whether `--jail` can be had here, by the same checks a jailed spawn makes: for
/// `grove doctor`, so that what it says and what a spawn does never differ.
#[derive(Debug)]
pub struct JailProbe {
    pub abi: i32,
    pub required_abi: i32,
    pub cgroup: bool,
    /// Why a jailed spawn would be refused; `None` when it would run.
    pub refusal: Option<String>,
}

pub fn probe() -> JailProbe {
    let refusal = check_kernel()
        .and_then(|()| check_cgroup())
        .err()
        .map(|e| e.to_string());
    JailProbe {
        abi: landlock_abi(),
        required_abi: REQUIRED_ABI,
        cgroup: grove_agent_shim::cgroup::usable(),
        refusal,
    }
}

/// Refuses a jailed spawn on a kernel that cannot enforce the whole jail.
pub fn check_kernel() -> Result<(), Error> {
    let abi = landlock_abi();
    if abi >= REQUIRED_ABI {
        return Ok(());
    }
    let release = grove_sys::proc::kernel_release()
        .map(|r| format!("this kernel ({r})"))
        .unwrap_or_else(|| "this kernel".into());
    Err(Error::Refused(format!(
        "cannot jail the agent: the jail needs Landlock ABI {REQUIRED_ABI} or newer \
         (Linux 6.12+, for scoped signals and abstract sockets), and {release} {}; \
         spawn without --jail (or with --no-jail where `jail = true` is configured)",
        describe_abi(abi)
    )))
}

/// Refuses a jailed spawn where the agent cannot get a cgroup of its own: the daemon
/// tells a jailed agent's connections by it, and `cgroup.kill` is what no fork outruns.
pub fn check_cgroup() -> Result<(), Error> {
    if grove_agent_shim::cgroup::usable() {
        return Ok(());
    }
    Err(Error::Refused(
        "cannot jail the agent: the jail needs a cgroup v2 of the agent's own (a mounted,          writable cgroup2 hierarchy), and none can be made here; spawn without --jail"
            .into(),
    ))
}

/// The jail of the agent whose worktree is `worktree`: see the table at the top.
pub fn jail_spec(worktree: &Path, tmp_dir: &Path, extra: &[PathBuf]) -> Result<JailSpec, Error> {
    let admin = admin_dir(worktree)?;
    let common = common_dir(&admin)?;
    // git makes `logs` on the first reflog write; inside the jail it could not.
    let logs = common.join("logs");
    if !logs.exists() {
        fs::create_dir_all(&logs)
            .map_err(|e| Error::Internal(format!("cannot create {}: {e}", logs.display())))?;
    }
    let mut writable = vec![
        worktree.to_path_buf(),
        tmp_dir.to_path_buf(),
        admin,
        common.join("objects"),
        common.join("refs"),
        logs,
    ];
    let reftable = common.join("reftable");
    if reftable.is_dir() {
        writable.push(reftable);
    }
    writable.extend(DEVICES.iter().map(PathBuf::from));
    writable.extend(extra.iter().cloned());
    Ok(JailSpec { writable })
}

/// The worktree's admin dir, from the `gitdir: <path>` line of its `.git` file.
fn admin_dir(worktree: &Path) -> Result<PathBuf, Error> {
    let dot_git = worktree.join(".git");
    let text = fs::read_to_string(&dot_git).map_err(|e| {
        Error::Internal(format!(
            "cannot jail the agent: cannot read {}: {e}",
            dot_git.display()
        ))
    })?;
    let gitdir = text
        .lines()
        .find_map(|line| line.strip_prefix("gitdir:"))
        .map(|path| PathBuf::from(path.trim()))
        .ok_or_else(|| {
            Error::Internal(format!(
                "cannot jail the agent: {} has no `gitdir:` line",
                dot_git.display()
            ))
        })?;
    Ok(if gitdir.is_absolute() {
        gitdir
    } else {
        worktree.join(gitdir)
    })
}

/// The repository's common git dir, from the admin dir's `commondir` file.
fn common_dir(admin: &Path) -> Result<PathBuf, Error> {
    let file = admin.join("commondir");
    let text = fs::read_to_string(&file).map_err(|e| {
        Error::Internal(format!(
            "cannot jail the agent: cannot read {}: {e}",
            file.display()
        ))
    })?;
    let common = PathBuf::from(text.trim());
    let common = if common.is_absolute() {
        common
    } else {
        admin.join(common)
    };
    fs::canonicalize(&common).map_err(|e| {
        Error::Internal(format!(
            "cannot jail the agent: the repository's git dir {}: {e}",
            common.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_admin_and_common_dirs_of_a_worktree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let common = dir.path().join("repo/.git");
        let admin = common.join("worktrees/wt");
        let worktree = dir.path().join("wt");
        for d in [
            &admin,
            &worktree,
            &common.join("objects"),
            &common.join("refs"),
        ] {
            fs::create_dir_all(d).expect("mkdir");
        }
        fs::write(
            worktree.join(".git"),
            format!("gitdir: {}\n", admin.display()),
        )
        .expect("write");
        fs::write(admin.join("commondir"), "../..\n").expect("write");
        let tmp = dir.path().join("tmp");
        let spec = jail_spec(&worktree, &tmp, &[PathBuf::from("/extra")]).expect("spec");
        let common = fs::canonicalize(&common).expect("canonical");
        let expected: Vec<PathBuf> = [
            worktree.clone(),
            tmp,
            admin,
            common.join("objects"),
            common.join("refs"),
            common.join("logs"),
        ]
        .into_iter()
        .chain(DEVICES.iter().map(PathBuf::from))
        .chain([PathBuf::from("/extra")])
        .collect();
        assert_eq!(spec.writable, expected);
        assert!(common.join("logs").is_dir());
    }

    #[test]
    fn a_worktree_without_a_git_file_cannot_be_jailed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = jail_spec(dir.path(), dir.path(), &[]).expect_err("no .git");
        assert!(err.to_string().contains(".git"), "{err}");
    }
}

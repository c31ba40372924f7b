//! What a jailed agent may write, and whether this kernel can jail at all.
//!
//! Reads stay open everywhere; writes (including create, remove, rename, truncate and
//! device ioctls) are allowed only beneath these paths:
//!
//! | path | why |
//! |---|---|
//! | the agent's repository | its files and its own `.git`: grove makes each jailed agent a repository of its own (`git/own_repo.rs`) whose objects borrow the user's read-only (alternates), so committing writes only there |
//! | `<state>/agents/<id>/tmp` | its private TMPDIR, removed when the agent ends (its view shows it at `/tmp` too) |
//! | `<state>/agents/<id>/tmp/home` | its private home, shown at `$HOME` in its view (`jail_home.rs`); a rule of its own, added at launch (`core/prepare.rs`), since that mount's walk up never meets the TMPDIR |
//! | `<state>/agents/<id>/setup-tmp` and its `home` | in place of the two above for its setup commands, which run before its shim (`core/prepare.rs`) |
//! | `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom`, `/dev/tty` | writing to the usual sinks (`> /dev/null` opens with O_TRUNC) |
//! | `--jail-write` paths and the `jail_write` setting | whatever else the user allows (a shared build cache, say) |
//!
//! Nothing of the user's repository is writable: not its refs (other branches, the
//! stash, `refs/replace`), not its objects, not its logs, config or hooks. The agent's
//! branch reaches the user's repository at collect, fetched by grove with hardened git
//! (`git/collect.rs`); until then the user sees `grove/<id>` at its base.
//!
//! Left closed on purpose: `/dev/pts` and `/dev/ptmx` (new pseudo-terminals), because
//! write and ioctl access there reaches every terminal of the machine (TIOCSTI types
//! into the user's shell); `/dev/shm`, shared with every other process; the user's
//! `/tmp` (its view shows its TMPDIR there, for setup commands too). `--jail-write` opens any of them when an agent needs it.

use crate::error::Error;
use grove_proto::methods::{JailGuarantee, JailProbe};
use grove_proto::shim::JailSpec;
use grove_sys::landlock::{describe_abi, kernel_abi, REQUIRED_ABI};
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
        crate::faults::test_var("GROVE_TEST_LANDLOCK_ABI")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(kernel_abi)
    })
}

/// Whether `--jail` can be had here, by the same checks a jailed spawn makes: for
/// `grove doctor` (through `daemon.probe`), so that what it says and what a spawn does
/// never differ.
pub fn probe() -> JailProbe {
    let (kernel, cgroup, namespaces) = (check_kernel(), check_cgroup(), check_namespaces());
    let guarantees = guarantees(kernel.is_ok(), cgroup.is_ok(), namespaces.is_ok());
    let cgroup_usable = cgroup.is_ok();
    let refusal = [kernel, cgroup, namespaces]
        .into_iter()
        .find_map(Result::err)
        .map(|e| e.to_string());
    JailProbe {
        abi: landlock_abi(),
        required_abi: REQUIRED_ABI,
        cgroup: cgroup_usable,
        refusal,
        guarantees,
    }
}

/// The guarantees `grove doctor` lists, each with what it rests on (the results of the
/// checks above): a user can check which of them this machine gives, and why `--jail`
/// is refused where one does not.
fn guarantees(landlock: bool, cgroup: bool, namespaces: bool) -> Vec<JailGuarantee> {
    let abi = format!("Landlock ABI {REQUIRED_ABI}+");
    let both = format!("{abi}, user and mount namespaces");
    let rows: [(&str, bool, &str); 10] = [
        (
            "reaches none of your Unix sockets (tmux, ssh-agent, D-Bus), only grove's",
            namespaces,
            "user and mount namespaces",
        ),
        (
            "sees none of your secrets (~/.ssh, ~/.aws, grove.db)",
            namespaces,
            "user and mount namespaces",
        ),
        ("sees only its own processes", namespaces, "a pid namespace"),
        (
            "writes only its worktree, its TMPDIR and --jail-write paths",
            landlock,
            &abi,
        ),
        (
            "signals and reaches abstract sockets only inside its jail",
            landlock,
            &abi,
        ),
        (
            "leaves nothing running after `grove kill` or its end",
            cgroup,
            "a cgroup v2 per agent",
        ),
        (
            "acts as itself on grove's socket, never as you",
            cgroup,
            "a cgroup v2 per agent",
        ),
        (
            "cannot act on your terminal through `grove attach` (queries, clipboard)",
            true,
            "grove's shim",
        ),
        (
            "configures nothing of grove: it never starts the daemon",
            true,
            "grove itself",
        ),
        (
            "runs nothing it wrote as you: setup on its content runs in such a jail",
            landlock && namespaces,
            &both,
        ),
    ];
    rows.into_iter()
        .map(|(guarantee, holds, rests_on)| JailGuarantee {
            guarantee: guarantee.into(),
            holds,
            rests_on: rests_on.into(),
        })
        .collect()
}

/// Refuses a jailed spawn on a kernel that cannot enforce the whole jail.
pub fn check_kernel() -> Result<(), Error> {
    match kernel_lacks() {
        None => Ok(()),
        Some(why) => Err(Error::Refused(format!(
            "cannot jail the agent: {why}; spawn without --jail (or with --no-jail where \
             `jail = true` is configured)"
        ))),
    }
}

/// Why this kernel cannot enforce the whole jail, if it cannot.
fn kernel_lacks() -> Option<String> {
    let abi = landlock_abi();
    if abi >= REQUIRED_ABI {
        return None;
    }
    let release = grove_sys::proc::kernel_release()
        .map(|r| format!("this kernel ({r})"))
        .unwrap_or_else(|| "this kernel".into());
    Some(format!(
        "the jail needs Landlock ABI {REQUIRED_ABI} or newer (Linux 6.12+, for scoped \
         signals and abstract sockets), and {release} {}",
        describe_abi(abi)
    ))
}

/// Why setup commands cannot be jailed here (the kernel or the namespaces a view
/// needs), if they cannot; they need no cgroup: the view's pid namespace ends with them.
pub fn setup_jail_lacks() -> Option<String> {
    kernel_lacks().or_else(namespaces_lack)
}

/// Refuses a jailed spawn where the agent cannot get a cgroup of its own: the daemon
/// tells a jailed agent's connections by it, and `cgroup.kill` is what no fork outruns.
pub fn check_cgroup() -> Result<(), Error> {
    if grove_sys::cgroup::usable() {
        return Ok(());
    }
    Err(Error::Refused(
        "cannot jail the agent: the jail needs a cgroup v2 of the agent's own (a mounted, \
         writable cgroup2 hierarchy), and none can be made here; spawn without --jail"
            .into(),
    ))
}

/// Refuses a jailed spawn where the agent cannot get its own view of the machine (user,
/// mount and pid namespaces: `grove_sys::view`).
pub fn check_namespaces() -> Result<(), Error> {
    match namespaces_lack() {
        None => Ok(()),
        Some(why) => Err(Error::Refused(format!(
            "cannot jail the agent: {why}, or spawn without --jail"
        ))),
    }
}

/// Why the view's namespaces cannot be had here, if they cannot; probed once.
fn namespaces_lack() -> Option<String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    let probed = PROBED.get_or_init(|| grove_sys::view::probe().map_err(|e| e.to_string()));
    probed.clone().err().map(|why| {
        format!(
            "the jail gives it namespaces of its own (user, mount, pid), and this machine \
             refuses them ({why}); allow unprivileged user namespaces (sysctl \
             kernel.unprivileged_userns_clone=1, or the AppArmor restriction \
             kernel.apparmor_restrict_unprivileged_userns=0)"
        )
    })
}

/// The jail of the agent whose repository is `repo`: see the table at the top.
pub fn jail_spec(repo: &Path, tmp_dir: &Path, extra: &[PathBuf]) -> Result<JailSpec, Error> {
    if !crate::git::own_repo::is_own_repo(repo) {
        return Err(Error::JailWithoutRepo {
            repo: repo.to_path_buf(),
        });
    }
    Ok(content_jail_spec(repo, tmp_dir, extra))
}

/// The jail of setup commands run for an unjailed agent on agents' content: its
/// worktree (linked to the user's repository, whose `.git` its view shows read-only)
/// and `tmp`.
pub fn content_jail_spec(worktree: &Path, tmp_dir: &Path, extra: &[PathBuf]) -> JailSpec {
    let mut writable = vec![worktree.to_path_buf(), tmp_dir.to_path_buf()];
    writable.extend(DEVICES.iter().map(PathBuf::from));
    writable.extend(extra.iter().cloned());
    JailSpec {
        writable,
        view: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn grants_the_agents_repository_and_nothing_of_the_users() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("agent");
        fs::create_dir_all(repo.join(".git")).expect("mkdir");
        let tmp = dir.path().join("tmp");
        let spec = jail_spec(&repo, &tmp, &[PathBuf::from("/extra")]).expect("spec");
        let expected: Vec<PathBuf> = [repo.clone(), tmp]
            .into_iter()
            .chain(DEVICES.iter().map(PathBuf::from))
            .chain([PathBuf::from("/extra")])
            .collect();
        assert_eq!(spec.writable, expected);
    }

    #[test]
    fn a_linked_worktree_is_not_jailed() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(".git"), "gitdir: /elsewhere\n").expect("write");
        let err = jail_spec(dir.path(), dir.path(), &[]).expect_err("linked");
        assert!(err.to_string().contains(".git"), "{err}");
    }
}

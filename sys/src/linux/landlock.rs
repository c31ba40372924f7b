//! The Landlock write jail (Landlock ABI 6: Linux 6.12).
//!
//! The shim builds the ruleset itself (it stays outside the jail, so it can still signal
//! and kill the whole tree), and the forked child enters it just before exec with two
//! plain system calls: `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`.
//!
//! What the jail handles:
//! - every write-like filesystem access (write, truncate, create, remove, rename and
//!   link, device ioctls): allowed only beneath the paths of the writable paths given to [`Jail::build`];
//! - the signal and abstract-unix-socket scopes: the jailed tree can signal and connect
//!   only to processes in the same jail (or a nested one).
//!
//! Reads and execution are not handled, so they stay open everywhere; pathname unix
//! sockets (the daemon's socket) stay reachable as well.

use landlock::{
    AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The oldest Landlock ABI the jail works with: 6 brings the signal and abstract-socket
/// scopes (Linux 6.12). Older ABIs would leave those open, so they are refused rather
/// than used for a weaker jail.
pub const REQUIRED_ABI: i32 = 6;

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask `landlock_create_ruleset` for the ABI version.
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version this kernel offers; 0 when it has no Landlock (not built
/// in, or not enabled at boot).
pub fn kernel_abi() -> i32 {
    // SAFETY: with a null attribute, size 0 and the VERSION flag, the call reads no
    // memory and only returns the ABI version (or -1 with errno set).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        0
    } else {
        version as i32
    }
}

/// The accesses the jail handles (and so denies outside the writable paths).
fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_write(ABI::V6)
}

/// A built ruleset, ready for the child to enter.
#[derive(Debug)]
pub struct Jail {
    ruleset: OwnedFd,
}

impl Jail {
    /// Builds the ruleset in the shim, allowing writes beneath `writable` (paths that do
    /// not exist are skipped). Fails, rather than degrading, when the kernel cannot
    /// enforce all of it.
    pub fn build(writable: &[PathBuf]) -> Result<Jail, String> {
        let abi = kernel_abi();
        if abi < REQUIRED_ABI {
            return Err(format!(
                "the Landlock jail needs Landlock ABI {REQUIRED_ABI} or newer; this kernel {}",
                describe_abi(abi)
            ));
        }
        let fail = |e: landlock::RulesetError| format!("cannot build the Landlock jail: {e}");
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(handled())
            .map_err(fail)?
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(fail)?
            .create()
            .map_err(fail)?;
        for path in writable {
            let Some(rule) = rule_for(path)? else {
                continue;
            };
            ruleset = ruleset.add_rule(rule).map_err(|e| {
                format!("cannot let the jail write beneath {}: {e}", path.display())
            })?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        let ruleset = fd.ok_or_else(|| "the kernel gave no Landlock ruleset".to_string())?;
        Ok(Jail { ruleset })
    }

    /// Puts the calling process in the jail. Async-signal-safe: meant for `pre_exec`,
    /// between fork and exec. The ruleset descriptor is close-on-exec, so the agent
    /// never sees it.
    pub fn enter(&self) -> io::Result<()> {
        super::supervise::set_no_new_privs()?;
        // SAFETY: landlock_restrict_self takes a ruleset fd (owned by self) and flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0 as libc::c_uint,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The rule for one writable path: everything handled beneath a directory, the
/// file-level rights on anything else; `None` when the path does not exist.
fn rule_for(path: &Path) -> Result<Option<PathBeneath<PathFd>>, String> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot jail {}: {e}", path.display())),
    };
    let access = if metadata.is_dir() {
        handled()
    } else {
        handled() & AccessFs::from_file(ABI::V6)
    };
    let fd = PathFd::new(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    Ok(Some(PathBeneath::new(fd, access)))
}

/// "has no Landlock" or "offers Landlock ABI N", for messages.
pub fn describe_abi(abi: i32) -> String {
    if abi <= 0 {
        "has no Landlock (not built in, or not enabled at boot: see the `lsm=` kernel \
         parameter)"
            .into()
    } else {
        format!("offers only Landlock ABI {abi}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handled_accesses_leave_reads_and_execution_open() {
        let handled = handled();
        assert!(!handled.contains(AccessFs::ReadFile));
        assert!(!handled.contains(AccessFs::ReadDir));
        assert!(!handled.contains(AccessFs::Execute));
        assert!(handled.contains(AccessFs::WriteFile | AccessFs::Refer | AccessFs::Truncate));
    }

    #[test]
    fn missing_paths_are_skipped() {
        let missing = Path::new("/nonexistent/grove/jail/test");
        assert!(matches!(rule_for(missing), Ok(None)));
    }
}

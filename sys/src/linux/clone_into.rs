//! Starting a child inside a cgroup: clone3 with `CLONE_INTO_CGROUP` (Linux 5.7).
//!
//! Why not fork, then write the child's pid to `cgroup.procs`: moving a process
//! between cgroups takes the kernel's `cgroup_threadgroup_rwsem` for writing, which
//! waits for an RCU grace period (10-20 ms on a 2-core VM, where it was most of an
//! agent's start). A child born inside takes that lock only for reading.

use nix::errno::Errno;
use nix::unistd::Pid;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `CLONE_INTO_CGROUP`, spelled here: libc's constant is an overflowing `c_int`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`): the same
/// layout on every architecture, unlike libc's, which only some targets have.
#[repr(C, align(8))]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Forks into the cgroup whose directory is `cgroup`: `Ok(None)` in the child,
/// `Ok(Some(pid))` in the parent.
///
/// # Safety
/// As `fork`: in the child of a multi-threaded process, only async-signal-safe calls.
/// Unlike libc's fork, no `pthread_atfork` handler runs.
pub unsafe fn fork_into(cgroup: BorrowedFd<'_>) -> Result<Option<Pid>, Errno> {
    // SAFETY: as this function's.
    unsafe { clone3(CLONE_INTO_CGROUP, Some(cgroup)) }
}

/// clone3 with `flags` (and the cgroup's directory when `CLONE_INTO_CGROUP` is among
/// them): `Ok(None)` in the child, `Ok(Some(pid))` in the parent.
///
/// # Safety
/// As [`fork_into`].
pub(super) unsafe fn clone3(
    flags: u64,
    cgroup: Option<BorrowedFd<'_>>,
) -> Result<Option<Pid>, Errno> {
    let args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.map_or(0, |fd| fd.as_raw_fd() as u64),
        ..CloneArgs::default()
    };
    // SAFETY: `args` is a valid clone_args of the size passed, alive for the call; with
    // no stack given, the child runs on a copy of ours, as after fork.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        -1 => Err(Errno::last()),
        0 => Ok(None),
        pid => Ok(Some(Pid::from_raw(pid as i32))),
    }
}

/// Starts `command` as a child born in the cgroup `cgroup` and returns its pid once it
/// has exec'd; an error (the command's, or the kernel's refusal) otherwise, with no
/// child left behind. Refused in a process with more than one thread: the child runs
/// `Command::exec`, which allocates between clone and exec, and no `pthread_atfork`
/// handler has made the allocator safe for that.
pub fn spawn_into(cgroup: BorrowedFd<'_>, command: &mut Command) -> io::Result<Pid> {
    if !single_threaded() {
        return Err(io::Error::other(
            "a child is born inside a cgroup only from a single-threaded process",
        ));
    }
    // Close-on-exec: a command that starts closes the child's end, and the parent
    // reads end-of-file; one that does not writes its errno first.
    let (report, reporter) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: this process has one thread (checked above; only that thread could have
    // started another since), so the child may do anything the parent could.
    match unsafe { fork_into(cgroup) }? {
        None => {
            drop(report);
            exec_or_report(command, &reporter)
        }
        Some(child) => {
            drop(reporter);
            match start_failure(report)? {
                None => Ok(child),
                Some(failure) => {
                    let _ = reap(child);
                    Err(failure)
                }
            }
        }
    }
}

/// True when this process runs one thread (`/proc/self/task` lists one).
pub(super) fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

/// In a child: execs `command`, or, if it cannot start, reports why on `reporter` (a
/// close-on-exec pipe, so that a start reads as end-of-file) and ends.
pub(super) fn exec_or_report(command: &mut Command, reporter: &OwnedFd) -> ! {
    report_and_exit(reporter, &command.exec())
}

/// In a child: says on `reporter` why the start failed (its errno, then its text when
/// it has more to say than the errno), and ends.
pub(super) fn report_and_exit(reporter: &OwnedFd, failure: &io::Error) -> ! {
    let mut message = failure
        .raw_os_error()
        .unwrap_or(libc::EIO)
        .to_ne_bytes()
        .to_vec();
    if failure.raw_os_error().is_none() {
        message.extend_from_slice(failure.to_string().as_bytes());
    }
    let _ = nix::unistd::write(reporter, &message);
    // SAFETY: ends the child without running the parent's destructors.
    unsafe { libc::_exit(127) }
}

/// In the parent, once its ends of `report` are closed: what the child reported
/// through [`report_and_exit`] (read until every writer is gone), `None` for a start.
pub(super) fn start_failure(report: OwnedFd) -> io::Result<Option<io::Error>> {
    let mut answer = Vec::new();
    io::Read::read_to_end(&mut std::fs::File::from(report), &mut answer)?;
    let Some((errno, text)) = answer.split_first_chunk::<4>() else {
        return Ok(None);
    };
    let errno = i32::from_ne_bytes(*errno);
    Ok(Some(if text.is_empty() {
        io::Error::from_raw_os_error(errno)
    } else {
        io::Error::new(
            io::Error::from_raw_os_error(errno).kind(),
            String::from_utf8_lossy(text).into_owned(),
        )
    }))
}

/// Waits for a child that ends without doing anything more (EINTR retried).
pub fn reap(child: Pid) -> nix::Result<nix::sys::wait::WaitStatus> {
    loop {
        match nix::sys::wait::waitpid(child, None) {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_process_with_threads_is_refused_before_anything_is_cloned() {
        // The test harness runs this on a thread of its own: two at least.
        let root = std::fs::File::open("/").expect("open /");
        let refused = spawn_into(root.as_fd(), &mut Command::new("true"))
            .expect_err("cloned from a multi-threaded process");
        assert!(refused.to_string().contains("single-threaded"), "{refused}");
    }
}

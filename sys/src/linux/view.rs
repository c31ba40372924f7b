//! A jailed agent's own view of the machine: new user, mount, pid and IPC namespaces
//! (Linux 3.8+; `mount_setattr` 5.12), entered by the agent's first process as it is
//! born (clone3), so that nothing of the user's runs in them.
//!
//! The view is built the way bubblewrap builds one: a fresh tmpfs as the root, the
//! paths that are shown bound into it at their own place (read-only unless writable),
//! a directory of the agent's own bound writable at another place (its private home at
//! `$HOME`), private tmpfs scratch directories (`/run`, ...), a `/proc` of the new pid
//! namespace, then `pivot_root` and the old root detached. What is not shown does not
//! exist for the agent: a Unix socket it cannot name, it cannot connect to (Landlock up
//! to ABI 7 cannot refuse a connect by path), a secret it cannot open, it cannot read.
//!
//! The first process (pid 1 of the namespace, "init") builds the view, starts the
//! agent as its child, reaps orphans, and once the agent has ended gives what is left
//! of the tree `grace` after a SIGTERM; when init ends, the kernel kills everything
//! still in the namespace, so nothing outlives it. Init tells the shim how the agent
//! ended through a pipe (a pid 1 cannot die of a signal to pass it on).

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use crate::types::{Ended, Entry, View};

/// The agent's first process, started in its view.
#[derive(Debug)]
pub struct Started {
    /// Init: the shim's child; it ends after the agent and its tree.
    pub init: Pid,
    /// Where init writes how the agent ended.
    status: OwnedFd,
}

impl Started {
    /// How the agent ended, once init has been reaped; `None` if init died before
    /// saying (it was killed).
    pub fn agent_status(&self) -> Option<Ended> {
        let mut buf = [0u8; 5];
        let read = nix::unistd::read(&self.status, &mut buf).ok()?;
        if read != buf.len() {
            return None;
        }
        let value = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
        match buf[0] {
            b'e' => Some(Ended::Exited(value)),
            b's' => Some(Ended::Signaled(value)),
            _ => None,
        }
    }
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
const NAMESPACES: u64 =
    (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC) as u64;

/// Where the new root is put together before `pivot_root`: any directory does, since
/// every source is opened before anything is mounted.
const STAGING: &str = "/tmp";

/// Starts `command` (whose `pre_exec` enters the Landlock jail) as pid 2 of a new pid
/// namespace that sees only `view`, below an init of grove's, born in `cgroup` when
/// given. Refused in a process with more than one thread, as [`super::clone_into`].
pub fn spawn(
    view: &View,
    cgroup: Option<BorrowedFd<'_>>,
    grace: Duration,
    command: &mut Command,
) -> io::Result<Started> {
    if !super::clone_into::single_threaded() {
        return Err(io::Error::other(
            "a jailed agent starts only from a single-threaded process",
        ));
    }
    let cwd = std::env::current_dir()?;
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let (report, reporter) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (status, status_writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let flags = NAMESPACES | cgroup.map_or(0, |_| CLONE_INTO_CGROUP);
    // SAFETY: one thread (checked above), so the child may do anything we could.
    match unsafe { super::clone_into::clone3(flags, cgroup) }.map_err(io::Error::from)? {
        None => {
            drop(report);
            drop(status);
            match enter(view, &cwd, uid.as_raw(), gid.as_raw()) {
                Ok(()) => init(command, reporter, &status_writer, grace),
                Err(failure) => super::clone_into::report_and_exit(&reporter, &failure),
            }
        }
        Some(init) => {
            drop(reporter);
            drop(status_writer);
            match super::clone_into::start_failure(report)? {
                None => Ok(Started { init, status }),
                Some(failure) => {
                    let _ = super::clone_into::reap(init);
                    Err(failure)
                }
            }
        }
    }
}

/// Whether this process may start a child in namespaces of its own (user namespaces
/// can be switched off for unprivileged users). Safe from a multi-threaded process:
/// the child only ends.
pub fn probe() -> io::Result<()> {
    // SAFETY: the child calls only _exit, which is async-signal-safe.
    match unsafe { super::clone_into::clone3(NAMESPACES, None) } {
        // SAFETY: ends the child without running the parent's destructors.
        Ok(None) => unsafe { libc::_exit(0) },
        Ok(Some(child)) => {
            super::clone_into::reap(child)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Init's part once the view is built: start the agent, reap, end after it.
fn init(command: &mut Command, reporter: OwnedFd, status: &OwnedFd, grace: Duration) -> ! {
    // SAFETY: init has one thread.
    let agent = match unsafe { nix::unistd::fork() } {
        Err(e) => super::clone_into::report_and_exit(&reporter, &e.into()),
        Ok(nix::unistd::ForkResult::Child) => super::clone_into::exec_or_report(command, &reporter),
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
    };
    // The agent reports its own exec failure; closing init's end lets the shim read
    // end-of-file once the agent has exec'd.
    drop(reporter);
    let ended = wait_for(agent);
    leave_nothing_behind(grace);
    let (kind, value) = match ended {
        Ended::Exited(code) => (b'e', code),
        Ended::Signaled(signal) => (b's', signal),
    };
    let mut message = vec![kind];
    message.extend_from_slice(&value.to_ne_bytes());
    let _ = nix::unistd::write(status, &message);
    // SAFETY: init ends here; the kernel kills whatever is left in the namespace.
    unsafe { libc::_exit(0) }
}

/// Reaps children (orphans of the tree too) until `agent` has ended.
fn wait_for(agent: Pid) -> Ended {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => return Ended::Exited(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == agent => {
                return Ended::Signaled(signal as i32)
            }
            Err(Errno::ECHILD) => return Ended::Exited(127),
            _ => continue,
        }
    }
}

/// What the agent left running gets SIGTERM, then `grace` to end, as outside a jail.
fn leave_nothing_behind(grace: Duration) {
    let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Err(Errno::ECHILD) => return,
                Err(Errno::EINTR) | Ok(_) => continue,
                Err(_) => return,
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        super::signal::wait_timeout(&chld, Some(deadline - now));
    }
}

/// Builds the view and enters it: runs in init, as root of its own user namespace.
fn enter(view: &View, cwd: &Path, uid: u32, gid: u32) -> io::Result<()> {
    map_ids(uid, gid)?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(context("cannot make the agent's mounts private"))?;
    let sources = open_sources(view)?;
    let staging = Path::new(STAGING);
    mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(context("cannot mount the view's root"))?;
    for (entry, source) in sources {
        let target = staged(staging, entry.path());
        match entry {
            Entry::Show { writable, .. } => {
                if let Some(source) = source {
                    bind(&source, &target, *writable)?;
                }
            }
            Entry::Scratch { .. } => scratch(&target, source.as_ref())?,
            Entry::Bind { .. } => match source {
                Some(source) => bind(&source, &target, true)?,
                None => scratch(&target, None)?,
            },
            Entry::Link { target: to, .. } => {
                make_parent(&target)?;
                std::os::unix::fs::symlink(to, &target)
                    .map_err(context_io(&format!("cannot link {}", target.display())))?;
            }
        }
    }
    let proc_dir = staging.join("proc");
    fs::create_dir_all(&proc_dir)?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(context("cannot mount the namespace's /proc"))?;
    pivot_into(staging)?;
    std::env::set_current_dir(cwd).map_err(context_io(&format!(
        "the agent's directory {} is not in its view",
        cwd.display()
    )))
}

fn map_ids(uid: u32, gid: u32) -> io::Result<()> {
    fs::write("/proc/self/setgroups", "deny")
        .and_then(|()| fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n")))
        .and_then(|()| fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n")))
        .map_err(context_io("cannot map the agent's user in its namespace"))
}

/// Opens every source before anything is mounted (a mount could hide one), in the
/// order the view is built: parents before what lies below them.
fn open_sources(view: &View) -> io::Result<Vec<(&Entry, Option<File>)>> {
    let mut entries: Vec<&Entry> = view.entries.iter().collect();
    entries.sort_by(|a, b| a.path().components().cmp(b.path().components()));
    let mut opened = Vec::with_capacity(entries.len());
    for entry in entries {
        let source = match entry {
            Entry::Show { path, .. } | Entry::Scratch { path } => open_path(path)?,
            // Opened by its source; missing, the place stays an empty directory.
            Entry::Bind { source, .. } => open_path(source)?,
            Entry::Link { .. } => None,
        };
        if matches!(entry, Entry::Show { .. }) && source.is_none() {
            continue;
        }
        opened.push((entry, source));
    }
    Ok(opened)
}

/// An `O_PATH` descriptor of `path`; `None` when it does not exist.
fn open_path(path: &Path) -> io::Result<Option<File>> {
    match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot open {} for the agent's view: {e}", path.display()),
        )),
    }
}

/// `path` below the staging root.
fn staged(staging: &Path, path: &Path) -> PathBuf {
    let mut staged = staging.to_path_buf();
    for component in path.components() {
        if let Component::Normal(name) = component {
            staged.push(name);
        }
    }
    staged
}

fn make_parent(target: &Path) -> io::Result<()> {
    match target.parent() {
        Some(parent) => fs::create_dir_all(parent).map_err(context_io(&format!(
            "cannot make {} in the view",
            parent.display()
        ))),
        None => Ok(()),
    }
}

/// A mount point like `source` (a directory or an empty file) at `target`.
fn mount_point(source: &File, target: &Path) -> io::Result<()> {
    make_parent(target)?;
    if source.metadata()?.is_dir() {
        match fs::create_dir(target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    } else if target.symlink_metadata().is_ok() {
        // A file of a read-only mount shown already (a config replaced by a copy, a
        // hidden file): opening it to create it would fail there.
        Ok(())
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)
            .map(drop)
    }
    .map_err(context_io(&format!(
        "cannot make {} in the view",
        target.display()
    )))
}

/// The magic link through which a mount reaches an opened source.
fn fd_path(source: &File) -> PathBuf {
    let mut path = OsString::from("/proc/self/fd/");
    path.push(source.as_raw_fd().to_string());
    PathBuf::from(path)
}

fn bind(source: &File, target: &Path, writable: bool) -> io::Result<()> {
    mount_point(source, target)?;
    mount(
        Some(&fd_path(source)),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(context(&format!("cannot show {}", target.display())))?;
    if !writable {
        read_only(target)?;
    }
    Ok(())
}

/// A private tmpfs over a directory; `/dev/null` over a file.
fn scratch(target: &Path, existing: Option<&File>) -> io::Result<()> {
    let is_file = existing.is_some_and(|f| f.metadata().is_ok_and(|m| !m.is_dir()));
    if is_file {
        let null = File::open("/dev/null")?;
        mount_point(existing.expect("checked"), target)?;
        return mount(
            Some(&fd_path(&null)),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(context(&format!("cannot hide {}", target.display())));
    }
    fs::create_dir_all(target).map_err(context_io(&format!(
        "cannot make {} in the view",
        target.display()
    )))?;
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(context(&format!("cannot hide {}", target.display())))
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Makes the mount at `target` and every mount below it read-only (mount_setattr,
/// Linux 5.12: a remount would have to repeat each locked flag of each submount).
fn read_only(target: &Path) -> io::Result<()> {
    let path = std::ffi::CString::new(target.as_os_str().as_bytes())?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: path and attr are valid for the call; the size is that of attr.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot make {} read-only: {e}", target.display()),
        ));
    }
    Ok(())
}

/// Makes `staging` the root and detaches the old one.
fn pivot_into(staging: &Path) -> io::Result<()> {
    std::env::set_current_dir(staging)?;
    let dot = c".";
    // SAFETY: both arguments are valid NUL-terminated paths.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } != 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!(
                "cannot enter the view: pivot_root: {}",
                io::Error::last_os_error()
            ),
        ));
    }
    umount2(".", MntFlags::MNT_DETACH).map_err(context("cannot detach the old root"))?;
    std::env::set_current_dir("/")
}

fn context(what: &str) -> impl Fn(Errno) -> io::Error + '_ {
    move |e| io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
}

fn context_io(what: &str) -> impl Fn(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_paths_stay_below_the_staging_root() {
        let staging = Path::new("/tmp");
        assert_eq!(
            staged(staging, Path::new("/usr/bin")),
            Path::new("/tmp/usr/bin")
        );
        assert_eq!(staged(staging, Path::new("/")), Path::new("/tmp"));
        assert_eq!(staged(staging, Path::new("/a/../b")), Path::new("/tmp/a/b"));
    }
}

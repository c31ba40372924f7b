//! Opening a path beneath a directory without following any symbolic link
//! (openat2, Linux 5.6), and syncing one filesystem (syncfs).

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::os::fd::{AsFd, OwnedFd};

/// Opens `path` beneath `dir` (never above it, never through a link on any component,
/// the last one too: ELOOP). A file created this way gets mode 0600.
pub fn open_beneath<Fd: AsFd>(dir: Fd, path: &str, flags: OFlag) -> Result<OwnedFd, Errno> {
    // openat2 takes a mode only with O_CREAT (EINVAL otherwise).
    let mode = if flags.contains(OFlag::O_CREAT) {
        Mode::from_bits_truncate(0o600)
    } else {
        Mode::empty()
    };
    // No O_NOFOLLOW: RESOLVE_NO_SYMLINKS refuses a link on any component, the last one
    // too, with ELOOP (O_NOFOLLOW with O_DIRECTORY would say ENOTDIR instead).
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(dir, path, how)
}

/// Writes out the filesystem that holds `dir` (and only that one), so that what it
/// frees at its next commit (btrfs) is free when it is measured.
pub fn sync_filesystem<Fd: AsFd>(dir: Fd) -> std::io::Result<()> {
    nix::unistd::syncfs(dir).map_err(std::io::Error::from)
}

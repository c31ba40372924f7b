//! Copy-on-write clones of files (FICLONE: btrfs, XFS with reflink, bcachefs, ...): the
//! clone shares the source's blocks until either is written, so a checkout cloned from
//! another costs no data blocks of its own.

use std::fs::File;
use std::io;
use std::path::Path;

/// Makes `dst` (an empty file opened for writing) a clone of `src`.
pub fn clone_file(src: &File, dst: &File) -> io::Result<()> {
    rustix::fs::ioctl_ficlone(dst, src).map_err(io::Error::from)
}

/// Whether files in `dir` can be cloned: tried on two unnamed files made there
/// (O_TMPFILE), which go with their descriptors, so that no probe is ever left behind
/// among the worktrees, whatever kills the process meanwhile.
pub fn supported(dir: &Path) -> bool {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let unnamed = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o600)
            .open(dir)
    };
    let cloned = (|| -> io::Result<()> {
        let mut src = unnamed()?;
        src.write_all(b"grove reflink probe")?;
        let dst = unnamed()?;
        clone_file(&src, &dst)
    })();
    cloned.is_ok()
}

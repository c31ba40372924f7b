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

/// Whether files in `dir` can be cloned: tried on two files made there and removed.
pub fn supported(dir: &Path) -> bool {
    let probe = |name: &str| {
        dir.join(format!(
            ".grove-reflink-probe-{}-{name}",
            std::process::id()
        ))
    };
    let (src_path, dst_path) = (probe("a"), probe("b"));
    let cloned = (|| -> io::Result<()> {
        std::fs::write(&src_path, b"grove reflink probe")?;
        let src = File::open(&src_path)?;
        let dst = File::create(&dst_path)?;
        clone_file(&src, &dst)
    })();
    let _ = std::fs::remove_file(&src_path);
    let _ = std::fs::remove_file(&dst_path);
    cloned.is_ok()
}

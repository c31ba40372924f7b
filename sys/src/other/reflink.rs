//! No FICLONE here (macOS's clonefile would be the port): nothing is cloned, and
//! callers check out instead.

use std::fs::File;
use std::io;
use std::path::Path;

pub fn clone_file(_src: &File, _dst: &File) -> io::Result<()> {
    Err(crate::unsupported("cloning files"))
}

pub fn supported(_dir: &Path) -> bool {
    false
}

//! Which program the daemon starts as a shim: the shim binary next to grove, or grove
//! itself (`grove __shim`) when that binary is missing.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The argument every shim is started with, whichever binary runs it. It names shims in
/// `/proc/<pid>/cmdline` for the descendant walk (`descendants::is_grove_service`) and
/// tells `grove` to act as a shim; `grove-shim` insists on it so that a person running it
/// by hand gets an explanation instead of a process silently waiting on stdin.
pub const SHIM_ARG: &str = "__shim";

/// How the daemon runs as `exe` starts its shims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShimProgram {
    /// `X-shim __shim`: the shim binary next to the grove executable `X`.
    Separate(PathBuf),
    /// `X __shim`: `missing` (where the shim binary should be) does not exist.
    Fallback { exe: PathBuf, missing: PathBuf },
}

impl ShimProgram {
    /// The shim of the grove executable `exe`: `X-shim` in the same directory when it is
    /// there (`grove` -> `grove-shim`, the test build `grove-e2e` -> `grove-e2e-shim`),
    /// else `exe` itself.
    pub fn for_exe(exe: &Path) -> ShimProgram {
        let missing = shim_path(exe);
        if missing.is_file() {
            ShimProgram::Separate(missing)
        } else {
            ShimProgram::Fallback {
                exe: exe.to_path_buf(),
                missing,
            }
        }
    }

    /// The program to execute (always with [`SHIM_ARG`]).
    pub fn program(&self) -> &Path {
        match self {
            ShimProgram::Separate(path) => path,
            ShimProgram::Fallback { exe, .. } => exe,
        }
    }
}

/// Where the shim binary of the grove executable `exe` belongs: `X-shim` next to `X`.
pub fn shim_path(exe: &Path) -> PathBuf {
    let mut name = exe
        .file_name()
        .unwrap_or(OsStr::new("grove"))
        .to_os_string();
    name.push("-shim");
    exe.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_sits_next_to_its_grove() {
        assert_eq!(
            shim_path(Path::new("/usr/bin/grove")),
            Path::new("/usr/bin/grove-shim")
        );
        assert_eq!(
            shim_path(Path::new("/t/debug/grove-e2e")),
            Path::new("/t/debug/grove-e2e-shim")
        );
    }

    #[test]
    fn falls_back_to_grove_itself_without_the_shim_binary() {
        let dir = std::env::temp_dir().join(format!("grove-shim-program-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let exe = dir.join("grove");
        std::fs::write(&exe, b"").expect("grove");
        assert_eq!(
            ShimProgram::for_exe(&exe),
            ShimProgram::Fallback {
                exe: exe.clone(),
                missing: dir.join("grove-shim"),
            }
        );
        assert_eq!(ShimProgram::for_exe(&exe).program(), exe);
        std::fs::write(dir.join("grove-shim"), b"").expect("grove-shim");
        assert_eq!(
            ShimProgram::for_exe(&exe),
            ShimProgram::Separate(dir.join("grove-shim"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! A real small filesystem for the tests of a full disk: a tmpfs, unmounted when
//! dropped. Needs root; elsewhere `mount` says why, and the test skips with
//! [`super::can_run`] (in CI it fails).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// A tmpfs of `size_mib` MiB mounted at `path` (made if missing).
    pub fn mount(path: &Path, size_mib: usize) -> Result<Tmpfs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root, so no tmpfs can be mounted".into());
        }
        fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m"),
                "grove-test",
            ])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Tmpfs { path: path.into() })
    }
}

/// A `size_mib` MiB tmpfs at `<short temp dir>/<name>`: the temp dir, the mount (drop
/// them in this order's reverse: unmounted first) and its path; none where it cannot
/// be mounted, once [`super::can_run`] said why.
pub fn small_fs(
    prefix: &str,
    name: &str,
    size_mib: usize,
) -> Option<(tempfile::TempDir, Tmpfs, PathBuf)> {
    let scratch = super::short_temp_dir(prefix);
    let path = scratch.path().join(name);
    match Tmpfs::mount(&path, size_mib) {
        Ok(mounted) => Some((scratch, mounted, path)),
        Err(why) => {
            super::can_run("tmpfs", Some(why));
            None
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

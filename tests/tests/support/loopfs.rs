//! Real copy-on-write filesystems for the tests of cloned worktrees: an XFS (with
//! reflink) or btrfs image in a sparse file, loop-mounted, unmounted and detached when
//! dropped. Needs root and mkfs.xfs / mkfs.btrfs (CI installs xfsprogs and
//! btrfs-progs); elsewhere the test skips with [`super::can_run`] (in CI it fails).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Xfs,
    Btrfs,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Xfs => "xfs",
            Kind::Btrfs => "btrfs",
        }
    }

    fn mkfs(self, image: &Path) -> Command {
        let mut command = match self {
            Kind::Xfs => {
                let mut c = Command::new("mkfs.xfs");
                c.args(["-q", "-f", "-m", "reflink=1"]);
                c
            }
            Kind::Btrfs => {
                let mut c = Command::new("mkfs.btrfs");
                c.args(["-q", "-f"]);
                c
            }
        };
        command.arg(image);
        command
    }
}

pub struct LoopFs {
    path: PathBuf,
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let out = command
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl LoopFs {
    /// A `size_mib` MiB filesystem of `kind` mounted at `path` (made if missing), its
    /// image beside it.
    pub fn mount(kind: Kind, path: &Path, size_mib: u64) -> Result<LoopFs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(format!("not root, so no {} can be mounted", kind.name()));
        }
        fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let image = path.with_extension("img");
        let file = fs::File::create(&image).map_err(|e| e.to_string())?;
        file.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        run(&mut kind.mkfs(&image), &format!("mkfs.{}", kind.name()))?;
        run(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(path),
            "mount -o loop",
        )?;
        Ok(LoopFs { path: path.into() })
    }
}

/// A filesystem of `kind` at `<short temp dir>/<name>`: the temp dir, the mount (the
/// mount drops first) and its path; none where it cannot be made, once
/// [`super::can_run`] said why.
pub fn loop_fs(
    kind: Kind,
    prefix: &str,
    size_mib: u64,
) -> Option<(tempfile::TempDir, LoopFs, PathBuf)> {
    let scratch = super::short_temp_dir(prefix);
    let path = scratch.path().join(kind.name());
    match LoopFs::mount(kind, &path, size_mib) {
        Ok(mounted) => Some((scratch, mounted, path)),
        Err(why) => {
            super::can_run(kind.name(), Some(why));
            None
        }
    }
}

/// Blocks in use on the filesystem holding `path`, in bytes, as `df` counts them once
/// what was written reached the disk (btrfs counts its metadata at its commit).
pub fn used_bytes(path: &Path) -> u64 {
    let synced = Command::new("sync").arg("-f").arg(path).status();
    assert!(
        synced.is_ok_and(|s| s.success()),
        "sync -f {}",
        path.display()
    );
    let stat = nix::sys::statvfs::statvfs(path).expect("statvfs");
    (stat.blocks() - stat.blocks_free()) * stat.fragment_size()
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Detaches the loop device too (mount -o loop set it to autoclear).
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

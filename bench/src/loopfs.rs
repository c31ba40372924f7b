//! Filesystems of a given kind for case 15: an image in a sparse file in the bench's
//! temp dir, loop-mounted; unmounted (which detaches the loop device) when dropped.
//! Needs root and the filesystem's mkfs; without them, [`LoopFs::mount`] says why.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// XFS with reflink: files are cloned.
    Xfs,
    /// btrfs: files are cloned.
    Btrfs,
    /// ext4: no reflinks, grove checks out as git does.
    Ext4,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Xfs => "xfs",
            Kind::Btrfs => "btrfs",
            Kind::Ext4 => "ext4",
        }
    }

    pub fn clones(self) -> bool {
        !matches!(self, Kind::Ext4)
    }

    fn mkfs(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Kind::Xfs => ("mkfs.xfs", &["-q", "-f", "-m", "reflink=1"], "xfsprogs"),
            Kind::Btrfs => ("mkfs.btrfs", &["-q", "-f"], "btrfs-progs"),
            Kind::Ext4 => ("mkfs.ext4", &["-q", "-F"], "e2fsprogs"),
        }
    }
}

pub struct LoopFs {
    pub path: PathBuf,
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    let out = command
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Why a filesystem of `kind` cannot be mounted here, if it cannot: the case then
/// says so instead of measuring.
pub fn missing(kind: Kind) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(format!(
            "n/a (needs root to loop-mount {}; run as root)",
            kind.name()
        ));
    }
    let (mkfs, _, package) = kind.mkfs();
    let found = Command::new(mkfs).arg("-V").output().is_ok();
    (!found).then(|| format!("n/a (no {mkfs}: install {package})"))
}

impl LoopFs {
    /// A `size_gib` GiB filesystem of `kind` mounted at `path` (made), its image beside.
    pub fn mount(kind: Kind, path: &Path, size_gib: u64) -> Result<LoopFs> {
        std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
        let image = path.with_extension("img");
        let file = std::fs::File::create(&image)
            .with_context(|| format!("creating {}", image.display()))?;
        file.set_len(size_gib << 30)?;
        let (mkfs, args, _) = kind.mkfs();
        run(Command::new(mkfs).args(args).arg(&image), mkfs)?;
        run(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(path),
            "mount -o loop",
        )?;
        Ok(LoopFs { path: path.into() })
    }

    /// Bytes in use on the filesystem as `df` counts them, once all written reached
    /// the disk (btrfs counts its metadata at its commit).
    // statvfs's fields are u64 on Linux and narrower elsewhere (the macOS check).
    #[allow(clippy::unnecessary_cast)]
    pub fn used_bytes(&self) -> Result<u64> {
        run(Command::new("sync").arg("-f").arg(&self.path), "sync -f")?;
        let stat = nix::sys::statvfs::statvfs(&self.path)
            .with_context(|| format!("statvfs {}", self.path.display()))?;
        Ok((stat.blocks() as u64 - stat.blocks_free() as u64) * stat.fragment_size() as u64)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // mount -o loop set the device to autoclear: unmounting detaches it. Lazily if
        // something still holds it, so that the temp dir can go.
        let done = Command::new("umount").arg(&self.path).status();
        if !done.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
        let _ = std::fs::remove_file(self.path.with_extension("img"));
    }
}

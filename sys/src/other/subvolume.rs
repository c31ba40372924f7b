//! No btrfs here: nothing is a subvolume, and callers clone or check out instead.

use std::io;
use std::path::Path;

pub fn on_btrfs(_dir: &Path) -> bool {
    false
}

pub fn is_subvolume(_path: &Path) -> bool {
    false
}

pub fn create(_path: &Path) -> io::Result<()> {
    Err(crate::unsupported("btrfs subvolumes"))
}

pub fn snapshot(_source: &Path, _dest: &Path) -> io::Result<()> {
    Err(crate::unsupported("btrfs snapshots"))
}

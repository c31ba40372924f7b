//! No /proc here: nothing is known about other processes, and no mount is a cgroup.

use std::collections::HashMap;
use std::path::PathBuf;

pub use crate::types::{Mount, Stat};

pub fn stat(_pid: u32) -> Option<Stat> {
    None
}

pub fn start_time(_pid: u32) -> Option<u64> {
    None
}

pub fn parent(_pid: u32) -> Option<u32> {
    None
}

pub fn is_same_process(_pid: u32, _started: u64) -> bool {
    false
}

pub fn all_pids() -> Vec<u32> {
    Vec::new()
}

pub fn table() -> HashMap<u32, Stat> {
    HashMap::new()
}

pub fn argv(_pid: u32) -> Option<Vec<Vec<u8>>> {
    None
}

pub fn rss_bytes(_pid: u32) -> Option<u64> {
    None
}

pub fn rss_split(_pid: u32) -> Option<(u64, u64)> {
    None
}

pub fn mapped_files(_pid: u32) -> Option<Vec<PathBuf>> {
    None
}

pub fn clock_ticks_per_second() -> u64 {
    100
}

pub fn cgroup(_pid: u32) -> Option<String> {
    None
}

pub fn cgroups(_pid: u32) -> Vec<String> {
    Vec::new()
}

pub fn own_cgroup() -> Option<String> {
    None
}

pub fn own_v1_cgroup(_controller: &str) -> Option<String> {
    None
}

pub fn mounts() -> Vec<Mount> {
    Vec::new()
}

pub fn cgroup2_mount() -> Option<Mount> {
    None
}

pub fn v1_mount(_controller: &str) -> Option<Mount> {
    None
}

pub fn holds_flock(_pid: u32, _inode: u64) -> bool {
    false
}

pub fn kernel_release() -> Option<String> {
    None
}

pub fn exe(_pid: u32) -> Option<PathBuf> {
    None
}

pub fn cwd(_pid: u32) -> Option<PathBuf> {
    None
}

pub fn context_switches(_pid: u32) -> Option<u64> {
    None
}

pub fn load_average() -> Option<f64> {
    None
}

pub fn cpu_model() -> Option<String> {
    None
}

pub fn filesystem_type(_path: &std::path::Path) -> Option<String> {
    None
}

pub fn listening_unix_sockets(_pid: u32) -> Vec<PathBuf> {
    Vec::new()
}

pub fn waiting_on_terminal(_pid: u32, _tty: u64) -> bool {
    false
}

pub fn environ_has(_pid: u32, _entry: &[u8]) -> bool {
    false
}

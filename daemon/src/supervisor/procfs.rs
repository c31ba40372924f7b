//! Facts about processes, from the platform seam (`grove_sys::proc`, which parses /proc
//! on Linux).

pub use grove_sys::proc::{cgroup, is_same_process, parent, start_time};

/// Where the cgroup2 hierarchy is mounted.
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    grove_sys::proc::cgroup2_mount().map(|m| m.point)
}

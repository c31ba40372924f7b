//! Facts about processes, from the platform seam (`grove_sys::proc`, which parses /proc
//! on Linux).

pub use grove_sys::proc::{cgroup, is_same_process, parent, start_time};

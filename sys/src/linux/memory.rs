//! The allocator's hold on memory the process no longer uses.

/// Hands the allocator's free memory back to the kernel. glibc keeps what every
/// thread's arena freed for reuse: after a burst of work (20 collects, say) that is most
/// of the daemon's anonymous memory, idle or not.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists and takes any pad.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's heaps (arenas) at one per core, before threads start. Unbounded, every
/// new thread gets an arena of its own (up to eight per core), and each keeps what its
/// thread freed: after 20 collects on a big repository the daemon held 6.9 MiB idle, not
/// 4.0, until its blocking threads exited. The threads mostly wait, so sharing costs
/// nothing measurable (bench case 5).
pub fn limit_heap_arenas() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let arenas = i32::try_from(cores).unwrap_or(i32::MAX);
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets one of the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = arenas;
}

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

/// Makes every thread allocate from one glibc heap (arena), before threads start.
/// Otherwise each new thread gets an arena of its own (up to eight per core), and each
/// keeps what its thread freed: bench case 6's daemon peaked at 9-10 MiB over 20
/// collects on a big repository, and 7 with one heap (4.7 idle after, not 6.9). The
/// daemon runs few threads that mostly wait: state updates (case 5) ran as fast.
pub fn share_one_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets one of the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

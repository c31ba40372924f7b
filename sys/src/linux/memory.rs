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

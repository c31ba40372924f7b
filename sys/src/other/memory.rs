//! The allocator's hold on memory the process no longer uses.

/// Nothing to do here: the system allocators elsewhere return free memory themselves.
pub fn release_free_heap() {}

/// Nothing to do here: glibc's arenas are what this limits.
pub fn share_one_heap() {}

//! The allocator's hold on memory the process no longer uses.

/// Nothing to do here: the system allocators elsewhere return free memory themselves.
pub fn release_free_heap() {}

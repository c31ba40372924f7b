//! Work that must never compete with what users wait for.

/// Nothing here yet: agents run on Linux only, and so does the deletion this is for.
pub fn lower_this_thread() {}

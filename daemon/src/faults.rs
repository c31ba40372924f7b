//! Test-only crash points. With `GROVE_TEST_CRASH_AT=<point>` the daemon kills itself
//! with SIGKILL on reaching that point, so tests can prove that a crash there loses
//! nothing and leaves nothing half done. Points: `after_branch_create`,
//! `after_worktree_add`, `mid_pool_adopt` (a warm-pool worktree moved, git not yet
//! told), `mid_salvage`, `after_import` (a salvage in the user's repository, the
//! worktree not yet removed), `before_trust_release` (a collect done, the CLI's trust
//! entry for the removed worktree still there), `mid_state_commit`, `mid_compaction` (inside a state
//! group's transaction, its compaction done), `mid_session_rm`, `mid_session_gc`,
//! `before_answer` (a request with an idempotency key has taken effect, its answer is
//! not yet sent), `mid_answer` (an agent's question answered: the decision is stored in
//! its session, the record not yet saved).
//! With `GROVE_TEST_HOLD_AT=<point>` an async point never completes instead, so a test
//! can pile up work stuck there and kill the daemon at a moment of its choosing (with
//! `GROVE_TEST_HOLD_UNTIL=<file>`, only until that file exists). Hold points:
//! `prepared_worktree` (the worktree is added, the shim not yet started),
//! `rolling_back` (a restart's rollback of an interrupted preparation, not yet begun),
//! `startup_scan` (the janitor's start-up scan, not yet begun), `deleting` (the
//! deleter thread, before it deletes a removed worktree's files), `freezing` (a pause,
//! resume or a kill's thaw, before the freezer is asked).
//! `GROVE_TEST_SALVAGE_IN_PROCESS_BYTES` sets the largest index salvage handles in
//! process, so that its tests run both ways.

//! Compiled in only with the `test-hooks` feature in a build with debug assertions (a
//! release build never has them, whatever turned the feature on); otherwise every point
//! is a no-op.

#[cfg(not(all(feature = "test-hooks", debug_assertions)))]
#[inline(always)]
pub fn point(_name: &str) {}

#[cfg(all(feature = "test-hooks", debug_assertions))]
pub fn point(name: &str) {
    use std::sync::OnceLock;
    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    let wanted = CRASH_AT.get_or_init(|| std::env::var("GROVE_TEST_CRASH_AT").ok());
    if wanted.as_deref() == Some(name) {
        tracing::warn!(point = name, "GROVE_TEST_CRASH_AT: crashing on purpose");
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Holds the task that reaches the point for good when `GROVE_TEST_HOLD_AT` names it.
#[cfg(not(all(feature = "test-hooks", debug_assertions)))]
#[inline(always)]
pub async fn hold(_name: &str) {}

#[cfg(all(feature = "test-hooks", debug_assertions))]
pub async fn hold(name: &str) {
    if std::env::var("GROVE_TEST_HOLD_AT").ok().as_deref() != Some(name) {
        return;
    }
    let Some(until) = std::env::var_os("GROVE_TEST_HOLD_UNTIL") else {
        tracing::warn!(point = name, "GROVE_TEST_HOLD_AT: holding here for good");
        return std::future::pending::<()>().await;
    };
    tracing::warn!(
        point = name,
        "GROVE_TEST_HOLD_AT: holding here until {until:?} exists"
    );
    while !std::path::Path::new(&until).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// [`hold`] for a thread of its own (the deleter's): blocks it instead.
#[cfg(not(all(feature = "test-hooks", debug_assertions)))]
#[inline(always)]
pub fn hold_thread(_name: &str) {}

#[cfg(all(feature = "test-hooks", debug_assertions))]
pub fn hold_thread(name: &str) {
    if std::env::var("GROVE_TEST_HOLD_AT").ok().as_deref() != Some(name) {
        return;
    }
    let until = std::env::var_os("GROVE_TEST_HOLD_UNTIL");
    tracing::warn!(
        point = name,
        "GROVE_TEST_HOLD_AT: holding this thread until {until:?} exists"
    );
    while until
        .as_ref()
        .is_none_or(|until| !std::path::Path::new(until).exists())
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A `GROVE_TEST_*` variable, read only in the test build (`test-hooks`): release builds
/// never let the environment stand in for the kernel, the protocol or the bus.
pub fn test_var(name: &str) -> Option<String> {
    if cfg!(all(feature = "test-hooks", debug_assertions)) {
        std::env::var(name).ok()
    } else {
        None
    }
}

/// In the test build, every test checks the core's slot count: a worktree directory on
/// disk that the core's cached listing misses must be counted another way (`counted`:
/// a preparation, pool fill or restore that has not reported yet), or be a `grove
/// merge`'s temporary one (never a slot). A miss would let the core start one agent too many.
#[cfg(not(all(feature = "test-hooks", debug_assertions)))]
#[inline(always)]
pub fn check_worktree_listing(
    _root: &std::path::Path,
    _listing: &std::collections::HashSet<std::path::PathBuf>,
    _counted: impl Fn(&std::path::Path) -> bool,
) {
}

#[cfg(all(feature = "test-hooks", debug_assertions))]
pub fn check_worktree_listing(
    root: &std::path::Path,
    listing: &std::collections::HashSet<std::path::PathBuf>,
    counted: impl Fn(&std::path::Path) -> bool,
) {
    for dir in crate::worktree_root::worktree_dirs(root) {
        let merge = crate::worktree_root::is_merge_worktree(&dir);
        if !listing.contains(&dir) && !merge && !counted(&dir) {
            panic!(
                "the core's worktree listing misses {}: a slot would go uncounted",
                dir.display()
            );
        }
    }
}

/// The largest index salvage reads in process (`daemon/src/git/scratch.rs`);
/// `GROVE_TEST_SALVAGE_IN_PROCESS_BYTES` sets it, so that tests run both ways.
#[cfg(not(all(feature = "test-hooks", debug_assertions)))]
#[inline(always)]
pub fn salvage_in_process_bytes(default: u64) -> u64 {
    default
}

#[cfg(all(feature = "test-hooks", debug_assertions))]
pub fn salvage_in_process_bytes(default: u64) -> u64 {
    std::env::var("GROVE_TEST_SALVAGE_IN_PROCESS_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

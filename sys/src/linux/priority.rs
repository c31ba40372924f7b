//! Work that must never compete with what users wait for.

/// Makes the calling thread the machine's least urgent: CPU nice 19 and the idle I/O
/// class (it gets the disk only when nobody else wants it). Best effort: a thread that
/// cannot lower itself still does its work, only sooner.
pub fn lower_this_thread() {
    let tid = nix::unistd::gettid().as_raw();
    if let Some(pid) = rustix::process::Pid::from_raw(tid) {
        let _ = rustix::process::setpriority_process(Some(pid), 19);
    }
    // ioprio_set(IOPRIO_WHO_PROCESS, tid, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT): a
    // tid names one thread. Neither nix nor rustix wraps this call.
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    // SAFETY: ioprio_set takes three integers and touches no memory of ours.
    let _ = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
}

//! A seccomp filter (Linux 3.5) for a jailed agent's setup commands: no new Unix-domain
//! sockets.
//!
//! The daemon runs setup commands as its own children, before the agent's shim
//! exists, so a connection from one of them would not be placed under any agent:
//! it would be served as the user (an unjailed spawn, `grove trust`). The Landlock
//! jail (ABI 7) does not cover connecting to a socket by path, so the setup command is
//! kept from creating one at all: `socket(AF_UNIX, ...)` fails with EACCES, and so does
//! `io_uring_setup`, through which a socket could be made without the `socket` call.
//! `socketpair` (pipes between a tool and its children) still works.

use std::io;

const AUDIT_ARCH: u32 = if cfg!(target_arch = "x86_64") {
    0xC000_003E
} else if cfg!(target_arch = "aarch64") {
    0xC000_00B7
} else {
    0
};
/// x32 system calls on x86_64 carry this bit: refused, as another numbering.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The filter, built before fork; `install` loads it in the child.
pub struct NoSockets {
    program: Vec<libc::sock_filter>,
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

impl NoSockets {
    /// None on an architecture this filter does not know: no setup runs there.
    pub fn new() -> Option<NoSockets> {
        if AUDIT_ARCH == 0 {
            return None;
        }
        use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
        let load = BPF_LD | BPF_W | BPF_ABS;
        let deny = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        // Offsets into struct seccomp_data: nr at 0, arch at 4, args[0] (low half on
        // these little-endian targets) at 16. Jumps count from the next instruction.
        let program = vec![
            /* 0 */ stmt(load, 4),
            /* 1 */ jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 0, 7),
            /* 2 */ stmt(load, 0),
            /* 3 */ jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 5, 0),
            /* 4 */
            jump(
                BPF_JMP | BPF_JEQ | BPF_K,
                libc::SYS_io_uring_setup as u32,
                4,
                0,
            ),
            /* 5 */ jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_socket as u32, 0, 2),
            /* 6 */ stmt(load, 16),
            /* 7 */ jump(BPF_JMP | BPF_JEQ | BPF_K, libc::AF_UNIX as u32, 1, 0),
            /* 8 */ stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
            /* 9 */ stmt(BPF_RET | BPF_K, deny),
        ];
        Some(NoSockets { program })
    }

    /// Loads the filter into the calling process. Async-signal-safe (one prctl), for
    /// `pre_exec`; needs no_new_privs, which entering the jail has set.
    pub fn install(&self) -> io::Result<()> {
        let fprog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fprog points at the program, which self keeps alive for the call.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

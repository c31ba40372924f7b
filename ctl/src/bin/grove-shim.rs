//! `grove-shim`: the process that holds one agent, started by the daemon. A binary of
//! its own that links nothing but the shim, so that each running agent costs as little
//! memory as possible (see grove_agent_shim::ShimProgram).
//! No Rust runtime start-up: see grove_agent_shim::c_main for why.
#![no_main]

#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    grove_agent_shim::c_main()
}

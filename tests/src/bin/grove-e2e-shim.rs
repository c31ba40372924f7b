//! `grove-shim` as the black-box tests run it (ctl/src/bin/grove-shim.rs): `grove-e2e`
//! finds it next to itself.
#![no_main]

#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    grove_agent_shim::c_main()
}

//! The `grove` binary as the black-box tests run it (see tests/Cargo.toml).
fn main() -> std::process::ExitCode {
    grove_ctl::main()
}

fn main() -> std::process::ExitCode {
    grove_ctl::main()
}

//! The sandbox helper as a standalone binary (tests and benches launch it; the operator binary
//! re-executes itself as `cmdgate sandbox __helper` instead).

fn main() -> std::process::ExitCode {
    cmdgate_sandbox::helper_main()
}

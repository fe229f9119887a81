//! The sandbox helper as a standalone binary (tests and benches launch it; the operator binary
//! re-executes itself as `cmdgate sandbox __helper` instead). The unsafe code is in the library.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cmdgate_sandbox::helper_main()
}

//! cmdgate-run: the client Claude Code's Bash tool runs instead of a command cmdgate runs in its
//! mirror (`cmdgate-run TICKET`, written by the hook). It redeems the one-use ticket on the daemon's
//! decide socket, prints the command's output as it streams back and exits with the command's
//! status; it never runs anything itself. See `cmdgate_policy::wire::run` and
//! `cmdgate_hook::run_client`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let code = cmdgate_hook::run_client::main_with(
        &args,
        |k| std::env::var_os(k),
        std::env::current_dir(),
        std::env::vars_os().collect(),
        &mut cmdgate_hook::run_client::StdSink,
    );
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

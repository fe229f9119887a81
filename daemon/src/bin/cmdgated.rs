//! cmdgated: the routing daemon. Reads the operator's config, serves the decide and admin sockets
//! (bound here, or passed by systemd), and stops gracefully on SIGTERM/SIGINT.
//!
//! `cmdgated __sandbox-helper` is the sandbox's single-threaded helper process, which the daemon
//! re-executes for every test-run so that it never forks from its tokio threads.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use cmdgate_daemon::api::serve::{self, ServeOptions};
use cmdgate_sandbox::HelperCommand;

/// The argument that routes this binary to the sandbox helper.
const HELPER_ARG: &str = "__sandbox-helper";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(HELPER_ARG) {
        return cmdgate_sandbox::helper_main();
    }
    match run(&args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cmdgated: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let mut config_file = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--config" => {
                config_file = Some(PathBuf::from(it.next().context("--config needs a path")?))
            }
            "--version" => {
                println!("cmdgated {}", env!("CARGO_PKG_VERSION"));
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (cmdgated takes --config PATH)"),
        }
    }
    let program = std::env::current_exe()
        .context("cannot find the cmdgated binary for the sandbox helper")?;
    serve::run_blocking(ServeOptions {
        config_file,
        helper: HelperCommand {
            program,
            args: vec![HELPER_ARG.into()],
        },
        announce: true,
    })?;
    Ok(())
}

//! cmdgate: the operator CLI.

use clap::{Parser, Subcommand};

/// cmdgate: decide which shell commands an AI coding agent may run.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Show how cmdgate would decide a command, step by step, without executing anything.
    Explain(cmdgate_daemon::cli_explain::ExplainArgs),
    /// Sign or verify a tier map (CLAUDE_CMDS.md).
    Tiermap(cmdgate_daemon::cli_tiermap::TiermapArgs),
    /// Pin, list or unpin tier-map signing keys.
    Trust(cmdgate_daemon::cli_trust::TrustArgs),
    /// Test-run commands in the container mirror.
    Sandbox(cmdgate_daemon::cli_sandbox::SandboxArgs),
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Explain(args)) => {
            cmdgate_daemon::cli_explain::run(args).map(|()| std::process::ExitCode::SUCCESS)
        }
        Some(Command::Tiermap(args)) => cmdgate_daemon::cli_tiermap::run(args),
        Some(Command::Trust(args)) => cmdgate_daemon::cli_trust::run(args),
        Some(Command::Sandbox(args)) => cmdgate_daemon::cli_sandbox::main(args),
        None => Ok(std::process::ExitCode::SUCCESS),
    }
}

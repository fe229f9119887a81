//! cmdgate: the operator CLI.
#![forbid(unsafe_code)]

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
    /// Run the daemon in the foreground with the embedded defaults.
    Up(cmdgate_daemon::cli::up::UpArgs),
    /// What the running daemon is doing.
    Status(cmdgate_daemon::cli::status::StatusArgs),
    /// Read and verify the command audit.
    Audit(cmdgate_daemon::cli::audit::AuditArgs),
    /// Write the audit as a JSONL training dataset (docs/export.md).
    Export(cmdgate_daemon::cli::export::ExportArgs),
    /// Register the hook in Claude Code's settings.
    Hook(cmdgate_daemon::cli::hook::HookArgs),
    /// Find every setup in which cmdgate would fail open.
    Doctor(cmdgate_daemon::cli::doctor::DoctorArgs),
    /// Write a commented starter CLAUDE_CMDS.md (and sign it with --sign).
    Init(cmdgate_daemon::cli::init::InitArgs),
    /// Remembered decisions and learned entries.
    Rules(cmdgate_daemon::cli::rules::RulesArgs),
    /// Requests waiting for the operator's answer (background mode).
    Pending(cmdgate_daemon::cli::pending::PendingArgs),
    /// Let a pending request run (--remember: and every later identical one in this project).
    Approve(cmdgate_daemon::cli::pending::AnswerArgs),
    /// Deny a pending request (--remember: and every later identical one in this project).
    Reject(cmdgate_daemon::cli::pending::AnswerArgs),
    /// Reset circuit breakers (read-only mode ends).
    Breaker(cmdgate_daemon::cli::breaker::BreakerArgs),
    /// Grant, list or revoke the escape hatch for one agent user or session (system mode).
    EscapeHatch(cmdgate_daemon::cli::escape_hatch::EscapeHatchArgs),
    /// Show how cmdgate would decide a command, step by step, without executing anything.
    Explain(cmdgate_daemon::cli::explain::ExplainArgs),
    /// Mirrored runs: what each did and whether it was committed, rolled back or conflicted.
    Runs(cmdgate_daemon::cli::runs::RunsArgs),
    /// Restore the workspace to before a committed run.
    Undo(cmdgate_daemon::cli::runs::UndoArgs),
    /// Commit a rolled-back run kept for the operator (read `cmdgate runs show RUN --diff` first).
    Apply(cmdgate_daemon::cli::apply::ApplyArgs),
    /// Sign or verify a tier map (CLAUDE_CMDS.md).
    Tiermap(cmdgate_daemon::cli::tiermap::TiermapArgs),
    /// A one-time login link to the web console (Pending, History, Profile).
    Console(cmdgate_daemon::cli::console::ConsoleArgs),
    /// Pin, list or unpin tier-map signing keys.
    Trust(cmdgate_daemon::cli::trust::TrustArgs),
    /// Test-run commands in the container mirror.
    Sandbox(cmdgate_daemon::cli::sandbox::SandboxArgs),
    /// What the optional model reviewer would say (try), and how it agrees with people (eval).
    Reviewer(cmdgate_daemon::cli::reviewer::ReviewerArgs),
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Up(args)) => cmdgate_daemon::cli::up::run(args),
        Some(Command::Status(args)) => cmdgate_daemon::cli::status::run(args),
        Some(Command::Audit(args)) => cmdgate_daemon::cli::audit::run(args),
        Some(Command::Export(args)) => cmdgate_daemon::cli::export::run(args),
        Some(Command::Hook(args)) => cmdgate_daemon::cli::hook::run(args),
        Some(Command::Doctor(args)) => cmdgate_daemon::cli::doctor::run(args),
        Some(Command::Init(args)) => cmdgate_daemon::cli::init::run(args),
        Some(Command::Rules(args)) => cmdgate_daemon::cli::rules::run(args),
        Some(Command::Pending(args)) => cmdgate_daemon::cli::pending::list(args),
        Some(Command::Approve(args)) => cmdgate_daemon::cli::pending::answer(args, true),
        Some(Command::Reject(args)) => cmdgate_daemon::cli::pending::answer(args, false),
        Some(Command::Breaker(args)) => cmdgate_daemon::cli::breaker::run(args),
        Some(Command::EscapeHatch(args)) => cmdgate_daemon::cli::escape_hatch::run(args),
        Some(Command::Explain(args)) => {
            cmdgate_daemon::cli::explain::run(args).map(|()| std::process::ExitCode::SUCCESS)
        }
        Some(Command::Runs(args)) => cmdgate_daemon::cli::runs::run(args),
        Some(Command::Undo(args)) => cmdgate_daemon::cli::runs::undo(args),
        Some(Command::Apply(args)) => cmdgate_daemon::cli::apply::apply(args),
        Some(Command::Tiermap(args)) => cmdgate_daemon::cli::tiermap::run(args),
        Some(Command::Console(args)) => cmdgate_daemon::cli::console::run(args),
        Some(Command::Trust(args)) => cmdgate_daemon::cli::trust::run(args),
        Some(Command::Sandbox(args)) => cmdgate_daemon::cli::sandbox::main(args),
        Some(Command::Reviewer(args)) => cmdgate_daemon::cli::reviewer::run(args),
        None => Ok(std::process::ExitCode::SUCCESS),
    }
}

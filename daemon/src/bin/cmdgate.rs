//! cmdgate: the operator CLI.

use clap::Parser;

/// cmdgate: decide which shell commands an AI coding agent may run.
#[derive(Parser)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}

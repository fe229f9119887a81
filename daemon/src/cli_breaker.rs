//! `cmdgate breaker reset [--scope global|session:ID]`: the operator closes circuit breakers (the
//! verb denial reasons tell the model about). Through the admin socket; audited by the daemon.

use std::process::ExitCode;

use serde_json::json;

use crate::admin_client;
use crate::serve;

/// Arguments of `cmdgate breaker`.
#[derive(Debug, clap::Args)]
pub struct BreakerArgs {
    #[command(subcommand)]
    pub command: BreakerCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum BreakerCommand {
    /// Close breakers: one scope (`global`, `session:ID`), or every breaker.
    Reset {
        #[arg(long)]
        scope: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: BreakerArgs) -> anyhow::Result<ExitCode> {
    let BreakerCommand::Reset { scope, json } = args.command;
    let (_, paths) = serve::load(None)?;
    let answer = admin_client::call(
        &paths.admin_socket,
        "POST",
        "/admin/breaker/reset",
        Some(&json!({ "scope": scope })),
    )?;
    if json {
        println!("{answer}");
    } else {
        let scopes: Vec<&str> = answer["reset"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str())
            .collect();
        if scopes.is_empty() {
            println!("no breaker matched");
        } else {
            println!("reset: {}", scopes.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

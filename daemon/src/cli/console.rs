//! `cmdgate console`: a one-time login link to the daemon's web console (minted on the admin
//! socket, so only a peer allowed there gets one), printed or opened in the browser.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::api::serve;
use crate::api::types::ConsoleLogin;
use crate::cli::client;

/// Arguments of `cmdgate console`.
#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// Open the link with `xdg-open` instead of only printing it.
    #[arg(long)]
    pub open: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let answer = client::call::<(), ConsoleLogin>(
        &paths.admin_socket,
        "POST",
        "/admin/console/login",
        None,
    )?;
    let url = answer.value.url.clone();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer.raw)?);
    } else {
        println!("{url}");
        eprintln!(
            "(the link works once, within {} s; it signs this browser in until the daemon restarts)",
            answer.value.valid_s
        );
    }
    if args.open {
        let status = std::process::Command::new("xdg-open")
            .arg(&url)
            .status()
            .context("cannot run xdg-open: open the link by hand")?;
        if !status.success() {
            anyhow::bail!("xdg-open failed ({status}): open the link by hand");
        }
    }
    Ok(ExitCode::SUCCESS)
}

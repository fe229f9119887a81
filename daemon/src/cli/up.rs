//! `cmdgate up`: run the daemon in the foreground with the embedded defaults — state under
//! `CMDGATE_HOME` (else the XDG data dir), sockets per `policy::locations`, and a development signing
//! key generated on first run and pinned in the config dir (`cmdgate init --sign` signs with it).

use std::process::ExitCode;

use anyhow::Context;
use cmdgate_sandbox::HelperCommand;
use serde_json::json;

use crate::api::serve::{self, ServeOptions};
use crate::signing;

/// Arguments of `cmdgate up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Config file (default: config.toml in the config dir).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Do not create or pin the development signing key.
    #[arg(long)]
    pub no_dev_key: bool,
    /// Print the start-up summary as JSON (one line on stdout) before serving.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: UpArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(args.config.clone())?;
    let dev = if args.no_dev_key {
        None
    } else {
        Some(
            signing::ensure_dev_key(&paths.config_dir)
                .context("cannot prepare the development signing key")?,
        )
    };
    let summary = json!({
        "decide_socket": paths.decide_socket,
        "admin_socket": paths.admin_socket,
        "store": paths.db,
        "config": paths.config_file,
        "dev_key": dev.as_ref().map(|d| json!({"name": d.name, "version": d.version, "created": d.created, "pinned_now": d.newly_pinned})),
    });
    if args.json {
        println!("{summary}");
    } else {
        if let Some(d) = &dev {
            if d.created {
                eprintln!(
                    "cmdgate up: created the development signing key `{}` and pinned it in {}",
                    d.name,
                    paths.config_dir.display()
                );
            }
        }
        eprintln!("cmdgate up: next, in a project: `cmdgate init --sign` (a signed starter CLAUDE_CMDS.md) and `cmdgate hook install --project .`");
    }
    let program =
        std::env::current_exe().context("cannot find the cmdgate binary for the sandbox helper")?;
    serve::run_blocking(ServeOptions {
        config_file: args.config,
        helper: HelperCommand {
            program,
            args: vec!["sandbox".into(), "__helper".into()],
        },
        announce: !args.json,
    })?;
    Ok(ExitCode::SUCCESS)
}

//! `cmdgate init [--sign]`: write the commented starter `CLAUDE_CMDS.md` into a project and, with
//! `--sign`, sign it with the local development key (created and pinned on first use).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use cmdgate_policy::tiermap::{self, STARTER_MAP};
use serde_json::json;

use crate::api::serve;
use crate::signing::{self, sign_file, SignConfig, Signer};

/// Arguments of `cmdgate init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The project root (default: the current directory).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Sign the map with the local development key.
    #[arg(long)]
    pub sign: bool,
    /// Replace an existing CLAUDE_CMDS.md.
    #[arg(long)]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InitArgs) -> anyhow::Result<ExitCode> {
    let dir = match args.project {
        Some(p) => p,
        None => std::env::current_dir()?,
    };
    let path = dir.join(tiermap::FILE_NAME);
    let existed = path.exists();
    if existed && !args.force && !args.sign {
        bail!("{} exists; pass --force to replace it with the starter map, or --sign to sign it as it is", path.display());
    }
    if !existed || args.force {
        std::fs::write(&path, STARTER_MAP)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut signed = None;
    if args.sign {
        let (_, paths) = serve::load(None)?;
        let dev = signing::ensure_dev_key(&paths.config_dir)
            .context("cannot prepare the development signing key")?;
        let config = SignConfig {
            trusted_keys: signing::trusted_keys_path(&paths.config_dir),
            ledger_dir: paths.config_dir.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let s = runtime.block_on(sign_file(&path, Signer::Dev(&dev), &config))?;
        signed = Some(json!({"key": dev.name, "version": dev.version, "revision": s.revision}));
    }
    if args.json {
        println!(
            "{}",
            json!({"path": path, "written": !existed || args.force, "signed": signed})
        );
    } else {
        if !existed || args.force {
            println!("wrote the starter tier map to {}", path.display());
        }
        match &signed {
            Some(s) => println!("signed it with the development key `{}` (revision {})", s["key"].as_str().unwrap_or_default(), s["revision"]),
            None => println!("it is not signed yet: until it is, the project is read-only (`cmdgate init --sign` or `cmdgate tiermap sign`)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

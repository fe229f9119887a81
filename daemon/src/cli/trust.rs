//! `cmdgate trust add | list | remove`: the operator's pinned tier-map signing keys.

use crate::cli::tiermap::VaultArgs;
use crate::signing::{self, vault::parse_public_key};
use anyhow::{bail, Context as _};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cmdgate_policy::locations::Locations;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `cmdgate trust`.
#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    #[command(subcommand)]
    pub command: TrustCommand,
}

/// `cmdgate trust` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum TrustCommand {
    /// Pin a signing key: every version of a Vault transit key (--vault --key NAME), or one
    /// public key given by hand (--name N --version V --public-key B64).
    Add(AddArgs),
    /// Show the pinned keys.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Unpin every version of a key: maps it signed stop verifying.
    Remove {
        /// The key's name.
        name: String,
    },
}

/// Arguments of `cmdgate trust add`.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Fetch the public keys from Vault/OpenBao transit (VAULT_ADDR/VAULT_TOKEN or BAO_*).
    #[arg(long, requires = "key", conflicts_with_all = ["name", "version", "public_key"])]
    pub vault: bool,
    /// Transit key name (with --vault).
    #[arg(long, requires = "vault")]
    pub key: Option<String>,
    /// Key name (manual pinning).
    #[arg(long, requires_all = ["version", "public_key"])]
    pub name: Option<String>,
    /// Key version, as in `vault:vN:` (manual pinning).
    #[arg(long, requires = "name")]
    pub version: Option<u32>,
    /// Standard base64 of the 32-byte ed25519 public key (manual pinning).
    #[arg(long, requires = "name")]
    pub public_key: Option<String>,
    /// Reject signatures by versions below this one from now on.
    #[arg(long)]
    pub min_version: Option<u32>,
    #[command(flatten)]
    pub vault_args: VaultArgs,
}

/// Runs `cmdgate trust ...`.
pub fn run(args: TrustArgs) -> anyhow::Result<ExitCode> {
    let locations = Locations::from_env(|k| std::env::var(k).ok());
    let path = PathBuf::from(locations.trusted_keys());
    match args.command {
        TrustCommand::Add(a) => add(a, &path),
        TrustCommand::List { json } => list(&path, json),
        TrustCommand::Remove { name } => {
            let _lock = signing::files::lock_pinned_keys(&path)?;
            let mut keys = signing::load_pinned_keys(&path)?;
            if !keys.remove(&name) {
                bail!("key `{name}` is not pinned in {}", path.display());
            }
            signing::save_pinned_keys(&path, &keys)?;
            println!("unpinned `{name}` from {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn add(args: AddArgs, path: &Path) -> anyhow::Result<ExitCode> {
    let _lock = signing::files::lock_pinned_keys(path)?;
    let mut keys = signing::load_pinned_keys(path)?;
    let name = if args.vault {
        let key = args.key.context("--vault needs --key NAME")?;
        let transit = args.vault_args.connect()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("failed to start the async runtime")?;
        let public = runtime.block_on(transit.public_keys(&key))?;
        let report = public
            .pin_into(&mut keys)
            .with_context(|| format!("cannot pin `{key}` in {}", path.display()))?;
        let list = |v: &[u32]| {
            v.iter()
                .map(|n| format!("v{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !report.added.is_empty() {
            println!("pinned `{key}` {}", list(&report.added));
        }
        if !report.unchanged.is_empty() {
            println!("already pinned: `{key}` {}", list(&report.unchanged));
        }
        key
    } else {
        let (Some(name), Some(version), Some(b64)) = (args.name, args.version, args.public_key)
        else {
            bail!("give either --vault --key NAME, or --name N --version V --public-key BASE64");
        };
        let public = parse_public_key(&b64).map_err(|m| anyhow::anyhow!("--public-key: {m}"))?;
        keys.pin(&name, version, public)
            .with_context(|| format!("cannot pin `{name}` v{version}"))?;
        println!("pinned `{name}` v{version}");
        name
    };
    if let Some(min) = args.min_version {
        let highest = keys
            .key(&name)
            .and_then(|k| k.versions().last().map(|(v, _)| v));
        if highest.is_some_and(|h| min > h) {
            bail!("--min-version {min} is above every pinned version of `{name}`: nothing would verify");
        }
        keys.set_min_version(&name, min)?;
    }
    if let Some(min) = keys.key(&name).and_then(|k| k.min_version()) {
        println!("`{name}`: signatures by versions below v{min} are rejected");
    }
    signing::save_pinned_keys(path, &keys)?;
    println!("saved {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn list(path: &Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let keys = signing::load_pinned_keys(path)?;
    if as_json {
        let out: Vec<_> = keys
            .keys()
            .map(|(name, k)| {
                json!({
                    "name": name,
                    "min_version": k.min_version(),
                    "versions": k.versions().map(|(v, public)| json!({
                        "version": v,
                        "public_key": STANDARD.encode(public.as_bytes()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "trusted_keys": path.display().to_string(),
                "keys": out,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    if keys.is_empty() {
        println!("no keys pinned in {}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!("pinned keys in {}:", path.display());
    for (name, k) in keys.keys() {
        for (v, public) in k.versions() {
            let retired = k.min_version().is_some_and(|m| v < m);
            let note = if retired {
                "  (below min_version: rejected)"
            } else {
                ""
            };
            println!("  {name} v{v} {}{note}", STANDARD.encode(public.as_bytes()));
        }
        if let Some(m) = k.min_version() {
            println!("  {name} min_version {m}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `cmdgate tiermap sign | verify`: sign a `CLAUDE_CMDS.md` with Vault transit (or the development
//! key), and check one against the pinned keys.

use crate::signing::revision::Ledger;
use crate::signing::{
    self, files, sign_file, SignConfig, Signer, TlsVerify, Transit, VaultConfig,
    DEFAULT_TRANSIT_MOUNT,
};
use anyhow::Context as _;
use cmdgate_policy::locations::Locations;
use cmdgate_policy::tiermap::{self, check_revision, verify, ReplayError, Trailer, VerifyError};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `cmdgate tiermap`.
#[derive(Debug, clap::Args)]
pub struct TiermapArgs {
    #[command(subcommand)]
    pub command: TiermapCommand,
}

/// `cmdgate tiermap` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum TiermapCommand {
    /// Sign a tier map in place with a Vault/OpenBao transit key (or --dev), raising `revision:`
    /// when needed so the new map supersedes the last one.
    Sign(SignArgs),
    /// Check a tier map's signature against the pinned keys and show every problem.
    Verify(VerifyArgs),
    /// Which retained past requests a proposed map would decide differently (replayed through the
    /// policy; nothing runs). The map need not be signed.
    Preview(crate::cli::preview::TiermapPreviewArgs),
}

/// How to reach Vault/OpenBao (address and token come from VAULT_ADDR/VAULT_TOKEN or
/// BAO_ADDR/BAO_TOKEN, never from the command line).
#[derive(Debug, Clone, clap::Args)]
pub struct VaultArgs {
    /// Mount path of the transit secrets engine.
    #[arg(long, default_value = DEFAULT_TRANSIT_MOUNT)]
    pub transit_mount: String,
    /// PEM CA certificate (bundle) for the Vault server's certificate (default: VAULT_CACERT or
    /// BAO_CACERT).
    #[arg(long, value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    /// INSECURE: do not check Vault's TLS certificate. Anyone on the network path can then read the
    /// token and sign in Vault's place. Only for throwaway test servers.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

impl VaultArgs {
    /// Connects to the transit mount with the environment's address and token.
    pub fn connect(&self) -> anyhow::Result<Transit> {
        let mut config = VaultConfig::from_env(|k| std::env::var(k).ok())?;
        if let Some(ca) = &self.ca_cert {
            config.ca_cert = Some(ca.clone());
        }
        if self.insecure_skip_tls_verify {
            eprintln!("warning: TLS certificate checking is OFF (--insecure-skip-tls-verify)");
            config.tls = TlsVerify::InsecureSkipVerify;
        }
        Ok(Transit::connect(&config, &self.transit_mount)?)
    }
}

/// Arguments of `cmdgate tiermap sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The tier map to sign (rewritten atomically; untouched on any error).
    pub path: PathBuf,
    /// Transit key name.
    #[arg(long, default_value = "cmdgate-tiermap", conflicts_with = "dev")]
    pub key: String,
    /// Sign with the local development key instead of Vault (created and pinned on first use).
    #[arg(long)]
    pub dev: bool,
    #[command(flatten)]
    pub vault: VaultArgs,
}

/// Arguments of `cmdgate tiermap verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The tier map to check.
    pub path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cmdgate tiermap ...`; the exit code is non-zero when a map is not valid.
pub fn run(args: TiermapArgs) -> anyhow::Result<ExitCode> {
    let locations = Locations::from_env(|k| std::env::var(k).ok());
    let config_dir = PathBuf::from(&locations.config_dir);
    match args.command {
        TiermapCommand::Sign(a) => run_sign(a, &config_dir),
        TiermapCommand::Verify(a) => run_verify(a, &config_dir),
        TiermapCommand::Preview(a) => crate::cli::preview::tiermap_preview(a),
    }
}

fn run_sign(args: SignArgs, config_dir: &Path) -> anyhow::Result<ExitCode> {
    // What the new map widens, before anything is signed.
    crate::cli::preview::print_expansion(config_dir, &args.path);
    let config = SignConfig {
        trusted_keys: signing::trusted_keys_path(config_dir),
        ledger_dir: config_dir.to_path_buf(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let signed = if args.dev {
        let dev = signing::ensure_dev_key(config_dir)?;
        if dev.created {
            eprintln!(
                "created the development signing key in {}",
                config_dir.display()
            );
        }
        runtime.block_on(sign_file(&args.path, Signer::Dev(&dev), &config))?
    } else {
        let transit = args.vault.connect()?;
        let signer = Signer::Vault {
            transit: &transit,
            key: &args.key,
        };
        runtime.block_on(sign_file(&args.path, signer, &config))?
    };
    for w in &signed.warnings {
        eprintln!("warning: {w}");
    }
    let rev = if signed.revision == signed.previous_revision {
        format!("revision {} (unchanged)", signed.revision)
    } else {
        format!(
            "revision {} (was {})",
            signed.revision, signed.previous_revision
        )
    };
    crate::cli::preview::keep_signed(config_dir, &args.path);
    println!(
        "signed {}: {rev}, key `{}` v{}, sha256 {}",
        args.path.display(),
        signed.key,
        signed.key_version,
        signed.content_hash
    );
    if let Some(reason) = &signed.not_pinned_reason {
        eprintln!(
            "warning: the daemon will not accept this map yet: {reason}\n  \
             pin the key with `cmdgate trust add --vault --key {}`",
            signed.key
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Stable short names of verification failures, for `--json` and scripts.
pub fn error_kind(e: &VerifyError) -> &'static str {
    match e {
        VerifyError::TooLarge { .. } => "too_large",
        VerifyError::NoTrailer => "no_trailer",
        VerifyError::DuplicateTrailer { .. } => "duplicate_trailer",
        VerifyError::MovedTrailer { .. } => "moved_trailer",
        VerifyError::MalformedTrailer { .. } => "malformed_trailer",
        VerifyError::BadSignatureEncoding { .. } => "bad_signature_encoding",
        VerifyError::UnknownKey { .. } => "unknown_key",
        VerifyError::VersionNotPinned { .. } => "version_not_pinned",
        VerifyError::BelowMinVersion { .. } => "below_min_version",
        VerifyError::SignatureMismatch { .. } => "signature_mismatch",
        VerifyError::InvalidMap(_) => "invalid_map",
    }
}

/// Why `verify` rejected a map: a signature problem, or a replay this machine can tell.
enum Rejection {
    /// The signature or map check failed.
    Verify(VerifyError),
    /// Validly signed, but older than (or a different map at the same revision as) what was signed
    /// for this path on this machine.
    Replay(ReplayError),
}

impl Rejection {
    fn kind(&self) -> &'static str {
        match self {
            Rejection::Verify(e) => error_kind(e),
            Rejection::Replay(ReplayError::Rollback { .. }) => "rollback",
            Rejection::Replay(ReplayError::RevisionReused { .. }) => "revision_reused",
        }
    }

    fn message(&self) -> String {
        match self {
            Rejection::Verify(e) => e.to_string(),
            Rejection::Replay(e) => format!("{e} (per the signing ledger on this machine)"),
        }
    }
}

fn run_verify(args: VerifyArgs, config_dir: &Path) -> anyhow::Result<ExitCode> {
    let shown = args.path.display().to_string();
    let text = files::read_text(&args.path)?.with_context(|| format!("{shown} does not exist"))?;
    let keys_path = signing::trusted_keys_path(config_dir);
    let keys = signing::load_pinned_keys(&keys_path)?;
    let mut result = verify(&text, &keys).map_err(Rejection::Verify);
    // A replay check against what this machine signed (the daemon does its own against what it
    // accepted). A missing or unreadable ledger checks nothing.
    if let Ok(v) = &result {
        let ledger = Ledger::load(config_dir).unwrap_or_default();
        let seen = std::fs::canonicalize(&args.path)
            .ok()
            .and_then(|abs| ledger.get(&abs).copied());
        if let Err(e) = check_revision(v.revision, &v.content_hash, seen.as_ref()) {
            result = Err(Rejection::Replay(e));
        }
    }
    // Every diagnostic of the map itself, signed or not, so one run shows everything to fix.
    let parsed = tiermap::parse(&text);
    let diagnostics: Vec<_> = match &parsed {
        Ok(_) => Vec::new(),
        Err(d) => d.iter().map(|d| d.clone().in_file(&shown)).collect(),
    };
    let trailer = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| Trailer::parse(l.trim_end_matches('\r')).ok());
    let revision = parsed.as_ref().ok().map(|m| m.revision);
    let content_hash = tiermap::content_hash(&text).to_string();
    let (key, key_version) = match &trailer {
        Some(t) => (Some(t.key.clone()), Some(t.version)),
        None => (None, None),
    };

    if args.json {
        let out = json!({
            "path": shown,
            "valid": result.is_ok(),
            "revision": revision,
            "key": key,
            "key_version": key_version,
            "content_hash": content_hash,
            "trusted_keys": keys_path.display().to_string(),
            "error": result.as_ref().err().map(|e| json!({
                "kind": e.kind(),
                "message": e.message(),
            })),
            "diagnostics": diagnostics.iter().map(|d| json!({
                "file": d.file, "line": d.line, "message": d.message,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match &result {
            Ok(v) => println!(
                "{shown}: valid: revision {}, key `{}` v{}, sha256 {}",
                v.revision, v.key, v.key_version, v.content_hash
            ),
            Err(e) => {
                println!("{shown}: NOT valid ({}): {}", e.kind(), e.message());
                if let Some(r) = revision {
                    println!("  revision {r}");
                }
                if let (Some(k), Some(v)) = (&key, key_version) {
                    println!("  trailer names key `{k}` v{v}");
                }
                println!("  pinned keys: {}", keys_path.display());
            }
        }
        for d in &diagnostics {
            println!("{d}");
        }
    }
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

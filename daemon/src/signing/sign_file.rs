//! Signing a tier-map file in place: check it, choose its revision, sign, self-check, write.
//!
//! Nothing is written unless every step succeeded: an unreachable Vault, a refused request or a
//! signature that does not verify leaves the file byte-identical.

use super::dev::DevKey;
use super::files::{self, FileError};
use super::revision::{self, Before, Ledger, RevisionError};
use super::vault::{Transit, VaultError};
use cmdgate_policy::tiermap::{
    self, content_hash, verify, ContentHash, Diagnostic, PinnedKeys, SeenRevision, TrailerError,
    VerifyError,
};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Who signs.
#[derive(Debug)]
pub enum Signer<'a> {
    /// A Vault/OpenBao transit key (latest version).
    Vault {
        /// Connection to the transit mount.
        transit: &'a Transit,
        /// The transit key's name.
        key: &'a str,
    },
    /// The local development key.
    Dev(&'a DevKey),
}

/// Where signing reads the pinned keys and keeps its ledger.
#[derive(Debug, Clone)]
pub struct SignConfig {
    /// The operator's pinned-keys file (tells whether the result will verify).
    pub trusted_keys: PathBuf,
    /// Directory of the signing ledger (the config dir).
    pub ledger_dir: PathBuf,
}

/// Why a map was not signed. The file is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Reading the map, the pinned keys, or writing the result failed.
    #[error(transparent)]
    File(#[from] FileError),
    /// The map does not exist.
    #[error("{} does not exist (create one with `cmdgate init`)", path.display())]
    Missing { path: PathBuf },
    /// The map does not parse: signing it would only produce a signed read-only project.
    #[error("{} is not a valid tier map; fix it before signing:\n{}", path.display(), lines(diagnostics))]
    InvalidMap {
        path: PathBuf,
        diagnostics: Vec<Diagnostic>,
    },
    /// Choosing or writing the revision failed.
    #[error(transparent)]
    Revision(#[from] RevisionError),
    /// Vault could not sign (unreachable, refused, wrong key type...).
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The local signer produced no trailer (the key name is invalid).
    #[error("cannot write the signature trailer")]
    Trailer(#[source] TrailerError),
    /// The new signature does not verify against the signer's own public key: nothing is written.
    #[error("the new signature does not verify against the signing key itself; nothing written")]
    SelfCheck(#[source] VerifyError),
}

fn lines(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("  {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What signing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The map's absolute path.
    pub path: PathBuf,
    /// `revision:` before signing.
    pub previous_revision: u64,
    /// `revision:` of the signed map.
    pub revision: u64,
    /// The key that signed.
    pub key: String,
    /// The key version that signed.
    pub key_version: u32,
    /// SHA-256 of the signed canonical bytes.
    pub content_hash: ContentHash,
    /// Whether the signed map verifies against the pinned keys as they are now; when false,
    /// `not_pinned_reason` says why (typically: the key or a new version is not pinned yet).
    pub verifies_with_pinned_keys: bool,
    /// Why the map does not verify with the pinned keys, if it does not.
    pub not_pinned_reason: Option<String>,
    /// Problems that did not stop signing (the ledger could not be written).
    pub warnings: Vec<String>,
}

/// Signs the tier map at `path` in place. See the module and [`revision`] documentation.
pub async fn sign_file(
    path: &Path,
    signer: Signer<'_>,
    config: &SignConfig,
) -> Result<Signed, SignError> {
    let text = files::read_text(path)?.ok_or_else(|| SignError::Missing {
        path: path.to_path_buf(),
    })?;
    let abs = std::fs::canonicalize(path).map_err(|source| FileError::Io {
        action: "resolve",
        path: path.to_path_buf(),
        source,
    })?;
    let shown = path.display().to_string();
    let map = tiermap::parse(&text).map_err(|diags| SignError::InvalidMap {
        path: path.to_path_buf(),
        diagnostics: diags.into_iter().map(|d| d.in_file(&shown)).collect(),
    })?;
    let pinned = files::load_pinned_keys(&config.trusted_keys)?;
    let current = verify(&text, &pinned);
    let before = Before {
        revision: map.revision,
        content_hash: content_hash(&text),
        validly_signed: current.is_ok(),
        has_trailer: !matches!(current, Err(VerifyError::NoTrailer)),
    };
    let mut warnings = Vec::new();
    let mut ledger = Ledger::load(&config.ledger_dir).unwrap_or_else(|e| {
        warnings.push(format!("signing ledger ignored: {e}"));
        Ledger::default()
    });
    let revision = revision::next_revision(&before, ledger.get(&abs))?;
    let body = if revision == map.revision {
        text.clone()
    } else {
        revision::set_revision(&text, revision)?
    };

    let (signed, own_keys) = match signer {
        Signer::Vault { transit, key } => {
            let signed = transit.sign_map(key, &body).await?;
            let public = transit.public_keys(key).await?;
            let own = public.as_pinned().map_err(|e| VaultError::BadPublicKey {
                key: key.to_owned(),
                version: 0,
                detail: e.to_string(),
            })?;
            (signed, own)
        }
        Signer::Dev(dev) => {
            let signed = tiermap::sign(&body, &dev.name, dev.version, &dev.signing_key)
                .map_err(SignError::Trailer)?;
            let mut own = PinnedKeys::new();
            own.pin(&dev.name, dev.version, dev.signing_key.verifying_key())
                .map_err(|_| SignError::Trailer(TrailerError::KeyName(dev.name.clone())))?;
            (signed, own)
        }
    };
    let checked = verify(&signed, &own_keys).map_err(SignError::SelfCheck)?;
    let with_pinned = verify(&signed, &pinned);

    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    files::write_atomic(path, signed.as_bytes(), mode)?;
    // The ledger records what was written, so `tiermap verify` never calls a map that failed to be
    // written the newest one.
    ledger.record(&abs, checked.seen());
    if let Err(e) = ledger.save(&config.ledger_dir) {
        warnings.push(format!("signing ledger not updated: {e}"));
    }

    Ok(Signed {
        path: abs,
        previous_revision: map.revision,
        revision: checked.revision,
        key: checked.key.clone(),
        key_version: checked.key_version,
        content_hash: checked.content_hash,
        verifies_with_pinned_keys: with_pinned.is_ok(),
        not_pinned_reason: with_pinned.err().map(|e| e.to_string()),
        warnings,
    })
}

/// What the daemon would record after accepting `signed`, for callers that keep their own ledger.
pub fn seen_of(signed: &Signed) -> SeenRevision {
    SeenRevision {
        revision: signed.revision,
        content_hash: signed.content_hash,
    }
}

//! Signature trailer, verification against pinned keys, replay check, signing, and the snapshot.
//!
//! The trailer is the last line of a signed map:
//!
//! ```text
//! <!-- cmdgate-signature: key=<key-name> sig=vault:v<N>:<standard base64 of 64 bytes> -->
//! ```
//!
//! `key` names the Vault transit key, `vN` its version (which picks the pinned public key); the
//! signature is ed25519 over [`signing_message`] of the text.

use super::canonical::{body_len, content_hash, is_trailer_like, lines, message_for};
use super::keys::{parse_version, valid_key_name};
use super::parse::{parse, TierMap, MAX_MAP_BYTES};
use super::{signing_message, ContentHash, Diagnostic, PinnedKeys};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey};
use std::fmt;

/// Start of a trailer line, up to the key.
pub const TRAILER_PREFIX: &str = "<!-- cmdgate-signature: key=";
/// End of a trailer line.
pub const TRAILER_SUFFIX: &str = " -->";

/// Why a trailer line (or a signature about to become one) is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrailerError {
    /// Not `<!-- cmdgate-signature: key=NAME sig=vault:vN:BASE64 -->`, exactly.
    #[error("expected `<!-- cmdgate-signature: key=<name> sig=vault:v<N>:<base64> -->`")]
    Syntax,
    /// Key names are `[A-Za-z0-9._-]`.
    #[error("invalid key name `{0}`")]
    KeyName(String),
    /// The signature must be `vault:v<N>:...` with N ≥ 1 and no leading zeros.
    #[error("signature must start with `vault:v<N>:`, found `{0}`")]
    SignaturePrefix(String),
}

/// A trailer split into its parts. The signature is kept as text; decoding it is a separate check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    /// The transit key that signed.
    pub key: String,
    /// The key version (`vault:vN:`): picks the pinned public key.
    pub version: u32,
    /// The base64 after `vault:vN:`, not yet decoded.
    pub signature_b64: String,
}

impl Trailer {
    /// Parses one trailer line, exactly as [`Trailer::to_line`] writes it.
    pub fn parse(line: &str) -> Result<Trailer, TrailerError> {
        let inner = line
            .strip_prefix(TRAILER_PREFIX)
            .and_then(|r| r.strip_suffix(TRAILER_SUFFIX))
            .ok_or(TrailerError::Syntax)?;
        let (key, sig) = inner.split_once(" sig=").ok_or(TrailerError::Syntax)?;
        if !valid_key_name(key) {
            return Err(TrailerError::KeyName(key.to_owned()));
        }
        let (version, b64) = split_vault_signature(sig)?;
        Ok(Trailer {
            key: key.to_owned(),
            version,
            signature_b64: b64.to_owned(),
        })
    }

    /// The trailer line, without a newline.
    pub fn to_line(&self) -> String {
        format!(
            "{TRAILER_PREFIX}{} sig=vault:v{}:{}{TRAILER_SUFFIX}",
            self.key, self.version, self.signature_b64
        )
    }

    /// Decodes the signature: standard base64 of exactly 64 bytes.
    pub fn signature(&self) -> Result<Signature, String> {
        decode_signature(&self.signature_b64)
    }
}

/// `vault:v3:AAAA` ⇒ (3, "AAAA").
fn split_vault_signature(sig: &str) -> Result<(u32, &str), TrailerError> {
    let bad = || TrailerError::SignaturePrefix(sig.chars().take(16).collect());
    let rest = sig.strip_prefix("vault:").ok_or_else(bad)?;
    let (v, b64) = rest.split_once(':').ok_or_else(bad)?;
    let version = parse_version(v).ok_or_else(bad)?;
    if b64.is_empty() || b64.contains(char::is_whitespace) {
        return Err(TrailerError::Syntax);
    }
    Ok((version, b64))
}

fn decode_signature(b64: &str) -> Result<Signature, String> {
    let bytes = STANDARD
        .decode(b64)
        .map_err(|_| "signature is not standard base64 (with `=` padding)".to_owned())?;
    let bytes: [u8; 64] = bytes.try_into().map_err(|b: Vec<u8>| {
        format!("signature is {} bytes, an ed25519 signature is 64", b.len())
    })?;
    Ok(Signature::from_bytes(&bytes))
}

/// Why a tier map was not accepted. Each cause is its own variant: the audit and the circuit breaker
/// tell an unsigned map from a forged one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Larger than [`MAX_MAP_BYTES`]; not hashed or parsed.
    #[error("tier map is {len} bytes, more than the limit of {max}")]
    TooLarge { len: usize, max: usize },
    /// No trailer line at all: the map was never signed.
    #[error("tier map is not signed (no signature trailer)")]
    NoTrailer,
    /// More than one trailer line.
    #[error("tier map has {} signature trailers (lines {lines:?}); exactly one is allowed", lines.len())]
    DuplicateTrailer { lines: Vec<usize> },
    /// The trailer is not the last non-empty line.
    #[error("signature trailer on line {line} is not the last line")]
    MovedTrailer { line: usize },
    /// The trailer line does not have the exact trailer syntax.
    #[error("malformed signature trailer on line {line}")]
    MalformedTrailer {
        line: usize,
        #[source]
        reason: TrailerError,
    },
    /// The signature is not standard base64 of 64 bytes.
    #[error("bad signature encoding: {reason}")]
    BadSignatureEncoding { reason: String },
    /// The trailer names a key that is not pinned.
    #[error("signed with key `{key}`, which is not pinned")]
    UnknownKey { key: String },
    /// The key is pinned, but not this version (for example, a rotation not yet pinned).
    #[error("signed with `{key}` v{version}, a version that is not pinned")]
    VersionNotPinned { key: String, version: u32 },
    /// The version is below the key's `min_version`.
    #[error("signed with `{key}` v{version}, below the minimum accepted version v{min_version}")]
    BelowMinVersion {
        key: String,
        version: u32,
        min_version: u32,
    },
    /// The signature does not verify: the content was changed, or another key signed it.
    #[error("signature does not match the content for `{key}` v{version} (changed after signing, or signed by another key)")]
    SignatureMismatch { key: String, version: u32 },
    /// The signature is valid but the map does not parse.
    #[error("tier map is signed but invalid: {}", summarize(.0))]
    InvalidMap(Vec<Diagnostic>),
}

fn summarize(diags: &[Diagnostic]) -> String {
    match diags {
        [] => "no diagnostics".to_owned(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// A map whose signature checked out against a pinned key, and that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedMap {
    /// The parsed map.
    pub map: TierMap,
    /// The key that signed it, for the audit.
    pub key: String,
    /// The key version that signed it, for the audit and rotation reports.
    pub key_version: u32,
    /// Same as `map.revision`; the replay check and every decision carry it.
    pub revision: u64,
    /// SHA-256 of the canonical bytes: tells two maps with the same revision apart.
    pub content_hash: ContentHash,
}

impl VerifiedMap {
    /// What the daemon records as the highest revision seen once this map is accepted.
    pub fn seen(&self) -> SeenRevision {
        SeenRevision {
            revision: self.revision,
            content_hash: self.content_hash,
        }
    }
}

/// Verifies `text` (a whole `CLAUDE_CMDS.md`) against `keys`. Order of checks: size, trailer
/// presence and position, trailer syntax, signature encoding, key and version, signature, then the
/// map itself. Only keys in `keys` are ever used.
pub fn verify(text: &str, keys: &PinnedKeys) -> Result<VerifiedMap, VerifyError> {
    let signed = check_signature(text, keys)?;
    let map = parse(text).map_err(VerifyError::InvalidMap)?;
    Ok(signed.with(map))
}

/// A map that parsed but whose signature has not been checked: what it says may be used only to
/// find out whether it bears on a question at all (the hook's fast path asks "could any entry of
/// it change this command's answer?" before paying for the signature). Nothing in it is trusted;
/// [`Unverified::verify`] is the only way to a [`VerifiedMap`], with the same checks as
/// [`verify`]. The text and its parse cannot be separated, so the map that is verified is the map
/// that was looked at.
#[derive(Debug, Clone)]
pub struct Unverified {
    text: String,
    map: TierMap,
}

impl Unverified {
    /// Parses `text` without looking at its signature. A text that does not parse can never
    /// verify either ([`verify`] parses what it verified), so its errors are final.
    pub fn parse(text: String) -> Result<Unverified, Vec<Diagnostic>> {
        let map = parse(&text)?;
        Ok(Unverified { text, map })
    }

    /// What the text says, untrusted.
    pub fn map(&self) -> &TierMap {
        &self.map
    }

    /// [`verify`] for this text, without parsing it again.
    pub fn verify(self, keys: &PinnedKeys) -> Result<VerifiedMap, VerifyError> {
        let signed = check_signature(&self.text, keys)?;
        Ok(signed.with(self.map))
    }
}

/// A signature that checked out, before the map is attached.
struct Signed {
    key: String,
    version: u32,
    hash: ContentHash,
}

impl Signed {
    fn with(self, map: TierMap) -> VerifiedMap {
        VerifiedMap {
            revision: map.revision,
            map,
            key: self.key,
            key_version: self.version,
            content_hash: self.hash,
        }
    }
}

/// Every check of [`verify`] but the parse.
fn check_signature(text: &str, keys: &PinnedKeys) -> Result<Signed, VerifyError> {
    if text.len() > MAX_MAP_BYTES {
        return Err(VerifyError::TooLarge {
            len: text.len(),
            max: MAX_MAP_BYTES,
        });
    }
    let lines = lines(text);
    let trailer_lines: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_trailer_like(l))
        .map(|(i, _)| i + 1)
        .collect();
    let line = match trailer_lines[..] {
        [] => return Err(VerifyError::NoTrailer),
        [one] => one,
        _ => {
            return Err(VerifyError::DuplicateTrailer {
                lines: trailer_lines,
            })
        }
    };
    // The one trailer must be the last non-empty line, i.e. outside the canonical body.
    if line <= body_len(&lines) {
        return Err(VerifyError::MovedTrailer { line });
    }
    let trailer = Trailer::parse(lines[line - 1])
        .map_err(|reason| VerifyError::MalformedTrailer { line, reason })?;
    let signature = trailer
        .signature()
        .map_err(|reason| VerifyError::BadSignatureEncoding { reason })?;
    let (key, version) = (trailer.key, trailer.version);
    let Some(pinned) = keys.key(&key) else {
        return Err(VerifyError::UnknownKey { key });
    };
    if let Some(min_version) = pinned.min_version().filter(|&m| version < m) {
        return Err(VerifyError::BelowMinVersion {
            key,
            version,
            min_version,
        });
    }
    let Some(public) = pinned.version(version) else {
        return Err(VerifyError::VersionNotPinned { key, version });
    };
    let hash = content_hash(text);
    if public
        .verify_strict(&message_for(&hash), &signature)
        .is_err()
    {
        return Err(VerifyError::SignatureMismatch { key, version });
    }
    Ok(Signed { key, version, hash })
}

/// Signs `text` with a local key (development signer of `cmdgate up`, tests) and returns the signed
/// document: the canonical text followed by the trailer. Produces exactly what Vault transit
/// signing followed by [`attach_signature`] produces.
pub fn sign(
    text: &str,
    key_name: &str,
    version: u32,
    key: &SigningKey,
) -> Result<String, TrailerError> {
    let sig = key.sign(&signing_message(text));
    let vault_sig = format!("vault:v{version}:{}", STANDARD.encode(sig.to_bytes()));
    attach_signature(text, key_name, &vault_sig)
}

/// Builds the signed document from a signature over [`signing_message`] (a Vault transit signature
/// string, `vault:vN:<base64>`): the canonical text, then the trailer line, then a newline. Any
/// trailer already at the end of `text` is replaced. The signature is checked for shape (base64 of
/// 64 bytes), not validity: verification needs the pinned keys.
pub fn attach_signature(
    text: &str,
    key_name: &str,
    vault_sig: &str,
) -> Result<String, TrailerError> {
    if !valid_key_name(key_name) {
        return Err(TrailerError::KeyName(key_name.to_owned()));
    }
    let (version, b64) = split_vault_signature(vault_sig)?;
    decode_signature(b64).map_err(|_| TrailerError::Syntax)?;
    let trailer = Trailer {
        key: key_name.to_owned(),
        version,
        signature_b64: b64.to_owned(),
    };
    let mut out = super::canonical_text(text);
    out.push_str(&trailer.to_line());
    out.push('\n');
    Ok(out)
}

/// The highest revision the daemon has accepted for a project and key, with its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenRevision {
    /// The revision number.
    pub revision: u64,
    /// Content hash of the map that carried it: the same revision is only accepted again with the
    /// same content (for example, re-signed by a new key version after a rotation).
    pub content_hash: ContentHash,
}

/// A verified map that must not be used because it would roll the project back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// An older revision than one already accepted: a replayed old map.
    #[error("tier map revision {revision} is older than revision {highest} already accepted (replayed map?)")]
    Rollback { revision: u64, highest: u64 },
    /// The accepted revision number, but different content: two signed maps share a revision, and
    /// switching between them would be a rollback the number cannot show.
    #[error("tier map revision {revision} was already accepted with different content")]
    RevisionReused { revision: u64 },
}

/// Replay check. Higher than `highest_seen` ⇒ ok (the caller then records it); lower ⇒ rollback;
/// equal ⇒ ok only for the same content hash (a reload or a re-signing of the same map).
pub fn check_revision(
    revision: u64,
    content_hash: &ContentHash,
    highest_seen: Option<&SeenRevision>,
) -> Result<(), ReplayError> {
    let Some(seen) = highest_seen else {
        return Ok(());
    };
    if revision < seen.revision {
        Err(ReplayError::Rollback {
            revision,
            highest: seen.revision,
        })
    } else if revision == seen.revision && *content_hash != seen.content_hash {
        Err(ReplayError::RevisionReused { revision })
    } else {
        Ok(())
    }
}

/// The tier map state a decision is made against. There is no "empty map": without a verified map
/// the project is read-only, and the reason says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// A signed, parsed map that passed the replay check.
    Verified(VerifiedMap),
    /// No usable map: only built-in tier 0 reads; everything else is denied with `reason`.
    ReadOnly {
        /// Shown in every denial ("tier map is not signed (no signature trailer)").
        reason: String,
    },
}

impl Snapshot {
    /// Read-only with a reason.
    pub fn read_only(reason: impl Into<String>) -> Snapshot {
        Snapshot::ReadOnly {
            reason: reason.into(),
        }
    }

    /// Verifies `text` and checks its revision: the whole loading decision in one pure call.
    /// `text` is `None` when the project has no `CLAUDE_CMDS.md`.
    pub fn load(
        text: Option<&str>,
        keys: &PinnedKeys,
        highest_seen: Option<&SeenRevision>,
    ) -> Snapshot {
        let Some(text) = text else {
            return Snapshot::read_only("no CLAUDE_CMDS.md in the project");
        };
        match verify(text, keys) {
            Err(e) => Snapshot::read_only(format!("tier map rejected: {e}")),
            Ok(v) => match check_revision(v.revision, &v.content_hash, highest_seen) {
                Err(e) => Snapshot::read_only(format!("tier map rejected: {e}")),
                Ok(()) => Snapshot::Verified(v),
            },
        }
    }

    /// The verified map, if any.
    pub fn verified(&self) -> Option<&VerifiedMap> {
        match self {
            Snapshot::Verified(v) => Some(v),
            Snapshot::ReadOnly { .. } => None,
        }
    }

    /// The tier map, if verified.
    pub fn tier_map(&self) -> Option<&TierMap> {
        self.verified().map(|v| &v.map)
    }

    /// The revision decisions should carry, if verified.
    pub fn revision(&self) -> Option<u64> {
        self.verified().map(|v| v.revision)
    }

    /// Why the project is read-only, if it is.
    pub fn read_only_reason(&self) -> Option<&str> {
        match self {
            Snapshot::Verified(_) => None,
            Snapshot::ReadOnly { reason } => Some(reason),
        }
    }
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Snapshot::Verified(v) => write!(
                f,
                "tier map revision {} signed by `{}` v{} ({})",
                v.revision, v.key, v.key_version, v.content_hash
            ),
            Snapshot::ReadOnly { reason } => write!(f, "read-only: {reason}"),
        }
    }
}

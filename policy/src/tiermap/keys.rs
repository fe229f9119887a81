//! Pinned public keys: the operator's list of tier-map signing keys, by name and version.
//!
//! The file is tiny and line-based so the hook can read it on every call:
//!
//! ```text
//! # comment
//! cmdgate-tiermap v1 <standard base64 of the 32-byte ed25519 public key>
//! cmdgate-tiermap v2 <...>
//! cmdgate-tiermap min_version 2
//! ```
//!
//! It lives in operator configuration, outside every project, and is never read from a project.

use super::Diagnostic;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Longest key name accepted (Vault transit key names are short path segments).
pub const MAX_KEY_NAME_LEN: usize = 128;

/// Name used in pinned-keys diagnostics unless the caller gives the real path with
/// [`Diagnostic::in_file`].
pub const PINNED_KEYS_FILE: &str = "pinned-keys";

/// Why a key could not be pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// Key names are `[A-Za-z0-9._-]`, 1 to [`MAX_KEY_NAME_LEN`] characters, not starting with `-`.
    #[error("invalid key name `{0}`: use letters, digits, `.`, `_`, `-` (not first), at most 128")]
    InvalidKeyName(String),
    /// Versions start at 1, as in Vault.
    #[error("key versions start at 1")]
    ZeroVersion,
    /// A key version's public key never changes; a different one under the same version is a mistake
    /// or an attack.
    #[error("key `{key}` v{version} is already pinned to a different public key")]
    Conflict { key: String, version: u32 },
    /// `min_version` for a key that has no pinned version.
    #[error("key `{0}` is not pinned")]
    NotPinned(String),
}

/// The pinned versions of one signing key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedKey {
    /// Public key of each pinned version: the trailer's `vault:vN:` picks one.
    versions: BTreeMap<u32, VerifyingKey>,
    /// Signatures by a lower version are rejected even if it is pinned (after a rotation that
    /// retired a possibly exposed version).
    min_version: Option<u32>,
}

impl PinnedKey {
    /// The public key of `version`, if pinned.
    pub fn version(&self, version: u32) -> Option<&VerifyingKey> {
        self.versions.get(&version)
    }

    /// Every pinned version with its public key, lowest first.
    pub fn versions(&self) -> impl Iterator<Item = (u32, &VerifyingKey)> {
        self.versions.iter().map(|(v, k)| (*v, k))
    }

    /// The lowest version whose signatures are accepted, if one was set.
    pub fn min_version(&self) -> Option<u32> {
        self.min_version
    }
}

/// Key name → pinned versions. Verification only ever uses keys from here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedKeys {
    /// Sorted by name so the serialized file is deterministic.
    keys: BTreeMap<String, PinnedKey>,
}

pub(crate) fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_KEY_NAME_LEN
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `v7` ⇒ 7; `None` for `v0`, `v07`, `7`, `v`.
pub(crate) fn parse_version(s: &str) -> Option<u32> {
    parse_positive(s.strip_prefix('v')?)
}

/// A positive decimal without sign or leading zeros.
pub(crate) fn parse_positive(s: &str) -> Option<u32> {
    if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl PinnedKeys {
    /// No keys: every map is rejected with "unknown key".
    pub fn new() -> Self {
        PinnedKeys::default()
    }

    /// Whether no key is pinned.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The pinned versions of `name`.
    pub fn key(&self, name: &str) -> Option<&PinnedKey> {
        self.keys.get(name)
    }

    /// Every pinned key by name.
    pub fn keys(&self) -> impl Iterator<Item = (&str, &PinnedKey)> {
        self.keys.iter().map(|(n, k)| (n.as_str(), k))
    }

    /// Pins `public` as version `version` of key `name`. Pinning the same key again is a no-op.
    pub fn pin(&mut self, name: &str, version: u32, public: VerifyingKey) -> Result<(), PinError> {
        if !valid_key_name(name) {
            return Err(PinError::InvalidKeyName(name.to_owned()));
        }
        if version == 0 {
            return Err(PinError::ZeroVersion);
        }
        let key = self.keys.entry(name.to_owned()).or_default();
        match key.versions.get(&version) {
            Some(existing) if *existing != public => Err(PinError::Conflict {
                key: name.to_owned(),
                version,
            }),
            _ => {
                key.versions.insert(version, public);
                Ok(())
            }
        }
    }

    /// Rejects signatures by versions of `name` below `min_version` from now on.
    pub fn set_min_version(&mut self, name: &str, min_version: u32) -> Result<(), PinError> {
        if min_version == 0 {
            return Err(PinError::ZeroVersion);
        }
        let key = self
            .keys
            .get_mut(name)
            .ok_or_else(|| PinError::NotPinned(name.to_owned()))?;
        key.min_version = Some(min_version);
        Ok(())
    }

    /// Removes every version of `name`; returns whether it was pinned.
    pub fn remove(&mut self, name: &str) -> bool {
        self.keys.remove(name).is_some()
    }

    /// Parses the pinned-keys file, collecting every diagnostic (file name [`PINNED_KEYS_FILE`]).
    pub fn parse(text: &str) -> Result<PinnedKeys, Vec<Diagnostic>> {
        let mut keys = PinnedKeys::new();
        let mut diags = Vec::new();
        let mut err =
            |line: usize, m: String| diags.push(Diagnostic::new(PINNED_KEYS_FILE, line, m));
        let mut pinned_on: BTreeMap<(String, u32), usize> = BTreeMap::new();
        let mut min_on: BTreeMap<String, (u32, usize)> = BTreeMap::new();

        for (i, raw) in text.split('\n').enumerate() {
            let ln = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let tokens: Vec<&str> = line.split_ascii_whitespace().collect();
            let [name, what, value] = tokens[..] else {
                err(ln, "expected `<key-name> v<N> <base64 public key>` or `<key-name> min_version <N>`".into());
                continue;
            };
            if !valid_key_name(name) {
                err(
                    ln,
                    format!("invalid key name `{name}`: use letters, digits, `.`, `_`, `-`"),
                );
                continue;
            }
            if what == "min_version" {
                match parse_positive(value) {
                    None => err(
                        ln,
                        format!("min_version must be a positive whole number, found `{value}`"),
                    ),
                    Some(_) if min_on.contains_key(name) => err(
                        ln,
                        format!(
                            "min_version of `{name}` given twice (first on line {})",
                            min_on[name].1
                        ),
                    ),
                    Some(v) => {
                        min_on.insert(name.to_owned(), (v, ln));
                    }
                }
                continue;
            }
            let Some(version) = parse_version(what) else {
                err(
                    ln,
                    format!("expected a key version like `v1` or `min_version`, found `{what}`"),
                );
                continue;
            };
            let public = match decode_public_key(value) {
                Ok(k) => k,
                Err(m) => {
                    err(ln, m);
                    continue;
                }
            };
            let id = (name.to_owned(), version);
            if let Some(first) = pinned_on.get(&id) {
                err(
                    ln,
                    format!("`{name}` v{version} is pinned twice (first on line {first})"),
                );
                continue;
            }
            pinned_on.insert(id, ln);
            keys.keys
                .entry(name.to_owned())
                .or_default()
                .versions
                .insert(version, public);
        }
        for (name, (min, ln)) in min_on {
            match keys.keys.get_mut(&name) {
                None => err(ln, format!("min_version for `{name}`, which has no pinned version")),
                Some(k) if k.versions.range(min..).next().is_none() => err(
                    ln,
                    format!("min_version {min} for `{name}` is above every pinned version, so nothing would verify"),
                ),
                Some(k) => k.min_version = Some(min),
            }
        }
        if diags.is_empty() {
            Ok(keys)
        } else {
            diags.sort_by_key(|d| d.line);
            Err(diags)
        }
    }

    /// The file [`PinnedKeys::parse`] reads, deterministic (keys and versions sorted).
    pub fn to_file_string(&self) -> String {
        let mut out = String::from(
            "# cmdgate pinned tier-map signing keys (written by `cmdgate trust`).\n\
             # <key-name> v<N> <standard base64 ed25519 public key>\n\
             # <key-name> min_version <N>   (signatures by lower versions are rejected)\n",
        );
        for (name, key) in &self.keys {
            for (v, public) in &key.versions {
                let _ = writeln!(out, "{name} v{v} {}", STANDARD.encode(public.as_bytes()));
            }
            if let Some(min) = key.min_version {
                let _ = writeln!(out, "{name} min_version {min}");
            }
        }
        out
    }
}

/// Standard base64 of 32 bytes that form a valid ed25519 point.
pub(crate) fn decode_public_key(b64: &str) -> Result<VerifyingKey, String> {
    let bytes = STANDARD
        .decode(b64)
        .map_err(|_| "public key is not standard base64 (with `=` padding)".to_owned())?;
    let bytes: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("public key is {} bytes, an ed25519 key is 32", b.len()))?;
    let key = VerifyingKey::from_bytes(&bytes)
        .map_err(|_| "public key is not a valid ed25519 point".to_owned())?;
    if key.is_weak() {
        return Err("public key is a weak (small-order) ed25519 point".to_owned());
    }
    Ok(key)
}

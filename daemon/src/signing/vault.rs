//! Vault / OpenBao transit: sign a tier map with an ed25519 transit key, fetch its public keys.
//!
//! What is signed is `cmdgate_policy::tiermap::signing_message(text)`: a domain-separated SHA-256
//! digest of the canonical bytes (90 bytes whatever the map's size, so Vault's request size limits
//! never matter, and the key never signs raw project bytes). Transit's ed25519 signs its input as
//! is; `prehashed` and `signature_algorithm` are ignored for ed25519, so they are not sent.
//!
//! The token is held in memory only: never written to disk, never printed (`Debug` redacts it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cmdgate_policy::tiermap::{
    attach_signature, signing_message, PinError, PinnedKey, PinnedKeys, TrailerError,
};
use ed25519_dalek::VerifyingKey;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;
use vaultrs::api::transit::responses::ReadKeyData;
use vaultrs::api::transit::KeyType;
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;

/// Default mount path of the transit secrets engine.
pub const DEFAULT_TRANSIT_MOUNT: &str = "transit";

/// How long one request to Vault may take before signing gives up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why talking to Vault failed. Each variant's message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// Neither `VAULT_ADDR` nor `BAO_ADDR` is set.
    #[error("no Vault address: set VAULT_ADDR (or BAO_ADDR), e.g. https://vault.example:8200")]
    NoAddress,
    /// Neither `VAULT_TOKEN` nor `BAO_TOKEN` is set.
    #[error("no Vault token: set VAULT_TOKEN (or BAO_TOKEN), e.g. after `vault login`")]
    NoToken,
    /// The address is not an http(s) URL.
    #[error("invalid Vault address `{address}`: expected an http:// or https:// URL")]
    BadAddress { address: String },
    /// The HTTP client could not be set up (for example, an unreadable CA certificate).
    #[error("failed to set up the Vault client for {address}: {detail}")]
    Client { address: String, detail: String },
    /// The server could not be reached (refused, DNS, TLS handshake, timeout).
    #[error("cannot reach Vault at {address}: {detail}")]
    Unreachable { address: String, detail: String },
    /// Vault answered with an error status (permission denied, no such key, sealed...).
    #[error("Vault at {address} refused `{operation}` (HTTP {code}): {}", errors.join("; "))]
    Api {
        address: String,
        operation: String,
        code: u16,
        errors: Vec<String>,
    },
    /// Vault answered, but not with what a transit request returns.
    #[error("unexpected answer from Vault at {address} to `{operation}`: {detail}")]
    Response {
        address: String,
        operation: String,
        detail: String,
    },
    /// The transit key is not ed25519: tier maps are verified as ed25519 only.
    #[error(
        "transit key `{key}` is of type {key_type}; tier maps need an ed25519 key (`type=ed25519`)"
    )]
    NotEd25519 { key: String, key_type: String },
    /// A derived key signs with a per-context key that cannot be pinned once.
    #[error("transit key `{key}` is derived; create a non-derived ed25519 key for tier maps")]
    DerivedKey { key: String },
    /// A public key from Vault is not a valid ed25519 key.
    #[error("transit key `{key}` v{version} has an unusable public key: {detail}")]
    BadPublicKey {
        key: String,
        version: u32,
        detail: String,
    },
    /// The signature is not `vault:vN:<base64 of 64 bytes>`.
    #[error("transit key `{key}` returned a signature cmdgate cannot use")]
    BadSignature {
        key: String,
        #[source]
        source: TrailerError,
    },
}

/// Whether to check the server's TLS certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVerify {
    /// Check it against the system roots and the configured CA certificate (the default).
    Verify,
    /// INSECURE: accept any certificate. Anyone on the network path can then see the token and
    /// answer in Vault's place. Only for a throwaway test server.
    InsecureSkipVerify,
}

/// Where Vault is and how to authenticate. Build it with [`VaultConfig::from_env`].
#[derive(Clone)]
pub struct VaultConfig {
    /// Base URL, `https://host:8200`.
    pub address: String,
    /// The Vault token; never printed (see the `Debug` impl) or stored.
    token: String,
    /// Extra CA certificate (PEM bundle) that signs the server's certificate.
    pub ca_cert: Option<PathBuf>,
    /// Certificate checking; see [`TlsVerify`].
    pub tls: TlsVerify,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Vault Enterprise / OpenBao namespace holding the transit mount, if any.
    pub namespace: Option<String>,
}

impl fmt::Debug for VaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultConfig")
            .field("address", &self.address)
            .field("token", &"<redacted>")
            .field("ca_cert", &self.ca_cert)
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl VaultConfig {
    /// Reads `VAULT_ADDR` (else `BAO_ADDR`), `VAULT_TOKEN` (else `BAO_TOKEN`), `VAULT_CACERT`
    /// (else `BAO_CACERT`) and `VAULT_NAMESPACE` (else `BAO_NAMESPACE`) through `var`. TLS checking is on; skipping it is never taken from the
    /// environment, only from an explicit option ([`VaultConfig::tls`]).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<VaultConfig, VaultError> {
        let var = |a: &str, b: &str| {
            var(a)
                .filter(|v| !v.is_empty())
                .or_else(|| var(b).filter(|v| !v.is_empty()))
        };
        let address = var("VAULT_ADDR", "BAO_ADDR").ok_or(VaultError::NoAddress)?;
        let token = var("VAULT_TOKEN", "BAO_TOKEN").ok_or(VaultError::NoToken)?;
        Ok(VaultConfig {
            address,
            token,
            ca_cert: var("VAULT_CACERT", "BAO_CACERT").map(PathBuf::from),
            tls: TlsVerify::Verify,
            timeout: DEFAULT_TIMEOUT,
            namespace: var("VAULT_NAMESPACE", "BAO_NAMESPACE"),
        })
    }
}

/// A connection to one transit mount.
pub struct Transit {
    client: VaultClient,
    /// Mount path of the transit engine (`transit` unless configured otherwise).
    mount: String,
    /// For error messages.
    address: String,
}

impl fmt::Debug for Transit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transit")
            .field("address", &self.address)
            .field("mount", &self.mount)
            .finish_non_exhaustive()
    }
}

/// The public side of a transit key: what `cmdgate trust add --vault` pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitPublicKeys {
    /// The transit key's name.
    pub name: String,
    /// Public key of every version Vault still holds, by version.
    pub versions: BTreeMap<u32, VerifyingKey>,
    /// The version new signatures are made with.
    pub latest_version: u32,
    /// Vault's `min_decryption_version`: Vault itself no longer verifies signatures by lower versions.
    pub min_decryption_version: u32,
}

/// What pinning a transit key changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinReport {
    /// Versions newly pinned.
    pub added: Vec<u32>,
    /// Versions that were pinned already, with the same public key.
    pub unchanged: Vec<u32>,
    /// The key's minimum accepted version afterwards, if any.
    pub min_version: Option<u32>,
}

impl TransitPublicKeys {
    /// A [`PinnedKeys`] holding only this key (to check a signature Vault just made).
    pub fn as_pinned(&self) -> Result<PinnedKeys, PinError> {
        let mut keys = PinnedKeys::new();
        for (&v, k) in &self.versions {
            keys.pin(&self.name, v, *k)?;
        }
        Ok(keys)
    }

    /// Pins every version in `keys`. The key's minimum version becomes Vault's
    /// `min_decryption_version` when that is above 1, but never goes down: a minimum the operator
    /// raised by hand stays. A version already pinned to a different public key is an error and
    /// nothing is changed.
    pub fn pin_into(&self, keys: &mut PinnedKeys) -> Result<PinReport, PinError> {
        let mut next = keys.clone();
        let before = keys.key(&self.name).cloned().unwrap_or_default();
        let mut report = PinReport {
            added: Vec::new(),
            unchanged: Vec::new(),
            min_version: None,
        };
        for (&v, k) in &self.versions {
            next.pin(&self.name, v, *k)?;
            if before.version(v).is_some() {
                report.unchanged.push(v);
            } else {
                report.added.push(v);
            }
        }
        let min = before
            .min_version()
            .max(Some(self.min_decryption_version).filter(|&m| m > 1));
        if let Some(m) = min {
            next.set_min_version(&self.name, m)?;
        }
        report.min_version = next.key(&self.name).and_then(PinnedKey::min_version);
        *keys = next;
        Ok(report)
    }
}

impl Transit {
    /// Builds a client for `config` and the transit engine mounted at `mount`. Does not contact the
    /// server yet.
    pub fn connect(config: &VaultConfig, mount: &str) -> Result<Transit, VaultError> {
        let address = config.address.trim_end_matches('/').to_owned();
        // vaultrs's builder panics on an unparsable URL: check it first.
        match url::Url::parse(&address) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => return Err(VaultError::BadAddress { address }),
        }
        let mut settings = VaultClientSettingsBuilder::default();
        settings
            .address(&address)
            .token(config.token.clone())
            .timeout(Some(config.timeout))
            .verify(config.tls == TlsVerify::Verify)
            .ca_certs(
                config
                    .ca_cert
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect(),
            )
            .namespace(config.namespace.clone())
            // Not taken from VAULT_CLIENT_CERT behind the caller's back.
            .identity(None);
        let settings = settings.build().map_err(|e| VaultError::Client {
            address: address.clone(),
            detail: e.to_string(),
        })?;
        let client = VaultClient::new(settings).map_err(|e| VaultError::Client {
            address: address.clone(),
            detail: chain(&e),
        })?;
        Ok(Transit {
            client,
            mount: mount.trim_matches('/').to_owned(),
            address,
        })
    }

    /// Signs `message` with the latest version of transit key `key`; returns Vault's signature
    /// string, `vault:vN:<base64>`.
    pub async fn sign_message(&self, key: &str, message: &[u8]) -> Result<String, VaultError> {
        let input = STANDARD.encode(message);
        vaultrs::transit::data::sign(&self.client, &self.mount, key, &input, None)
            .await
            .map(|r| r.signature)
            .map_err(|e| self.error(format!("sign with {}/keys/{key}", self.mount), e))
    }

    /// Signs the tier map `text` with transit key `key`: the returned text is the canonical map
    /// followed by the trailer (see `cmdgate_policy::tiermap::attach_signature`).
    pub async fn sign_map(&self, key: &str, text: &str) -> Result<String, VaultError> {
        let sig = self.sign_message(key, &signing_message(text)).await?;
        attach_signature(text, key, &sig).map_err(|source| VaultError::BadSignature {
            key: key.to_owned(),
            source,
        })
    }

    /// Reads transit key `key` and returns the public key of every version it holds.
    pub async fn public_keys(&self, key: &str) -> Result<TransitPublicKeys, VaultError> {
        let operation = format!("read {}/keys/{key}", self.mount);
        let r = vaultrs::transit::key::read(&self.client, &self.mount, key)
            .await
            .map_err(|e| self.error(operation.clone(), e))?;
        if !matches!(r.key_type, KeyType::Ed25519) {
            return Err(VaultError::NotEd25519 {
                key: key.to_owned(),
                key_type: format!("{:?}", r.key_type).to_lowercase(),
            });
        }
        if r.derived {
            return Err(VaultError::DerivedKey {
                key: key.to_owned(),
            });
        }
        let ReadKeyData::Asymmetric(entries) = r.keys else {
            return Err(VaultError::Response {
                address: self.address.clone(),
                operation,
                detail: "no public keys in the answer".to_owned(),
            });
        };
        let mut versions = BTreeMap::new();
        for (v, entry) in entries {
            let version: u32 =
                v.parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| VaultError::Response {
                        address: self.address.clone(),
                        operation: operation.clone(),
                        detail: format!("key version `{v}` is not a positive number"),
                    })?;
            let public =
                parse_public_key(&entry.public_key).map_err(|detail| VaultError::BadPublicKey {
                    key: key.to_owned(),
                    version,
                    detail,
                })?;
            versions.insert(version, public);
        }
        let to_u32 = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(TransitPublicKeys {
            name: key.to_owned(),
            latest_version: versions.keys().next_back().copied().unwrap_or(0),
            versions,
            min_decryption_version: to_u32(r.min_decryption_version),
        })
    }

    fn error(&self, operation: String, e: ClientError) -> VaultError {
        let address = self.address.clone();
        match e {
            ClientError::APIError { code, errors } => VaultError::Api {
                address,
                operation,
                code,
                errors,
            },
            ClientError::RestClientError {
                source: rustify_error,
            } if is_transport(&rustify_error) => VaultError::Unreachable {
                address,
                detail: chain(&rustify_error),
            },
            other => VaultError::Response {
                address,
                operation,
                detail: chain(&other),
            },
        }
    }
}

/// Whether the request never got an HTTP answer (connection refused, DNS, TLS, timeout).
fn is_transport(e: &(dyn std::error::Error + 'static)) -> bool {
    // rustify reports those as "Error sending HTTP request"; matching on the message keeps us off
    // rustify as a direct dependency.
    e.to_string().starts_with("Error sending HTTP request")
}

/// An error and its causes on one line: "a: b: c".
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if parts.last() != Some(&m) {
            parts.push(m);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Decodes a public key exactly as the pinned-keys file does (standard base64 of a 32-byte,
/// non-weak ed25519 point), by reusing its parser rather than repeating its checks.
pub fn parse_public_key(b64: &str) -> Result<VerifyingKey, String> {
    let line = format!("k v1 {}", b64.trim());
    match PinnedKeys::parse(&line) {
        Ok(keys) => keys
            .key("k")
            .and_then(|k| k.version(1))
            .copied()
            .ok_or_else(|| "not a public key".to_owned()),
        Err(diags) => Err(diags
            .into_iter()
            .next()
            .map(|d| d.message)
            .unwrap_or_else(|| "not a public key".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_prefers_vault_variables_then_bao_and_redacts_the_token() {
        let env = |k: &str| match k {
            "BAO_ADDR" => Some("http://127.0.0.1:8200".to_owned()),
            "VAULT_TOKEN" => Some("s.secret".to_owned()),
            "BAO_TOKEN" => Some("other".to_owned()),
            _ => None,
        };
        let c = VaultConfig::from_env(env).unwrap();
        assert_eq!(c.address, "http://127.0.0.1:8200");
        assert_eq!(c.token, "s.secret");
        assert_eq!(c.tls, TlsVerify::Verify);
        assert!(!format!("{c:?}").contains("s.secret"));
    }

    #[test]
    fn missing_address_or_token_says_which_variable() {
        assert!(matches!(
            VaultConfig::from_env(|_| None),
            Err(VaultError::NoAddress)
        ));
        let only_addr = |k: &str| (k == "VAULT_ADDR").then(|| "http://x:1".to_owned());
        assert!(matches!(
            VaultConfig::from_env(only_addr),
            Err(VaultError::NoToken)
        ));
    }

    #[test]
    fn a_bad_address_is_an_error_not_a_panic() {
        let env = |k: &str| match k {
            "VAULT_ADDR" => Some("not a url".to_owned()),
            "VAULT_TOKEN" => Some("t".to_owned()),
            _ => None,
        };
        let c = VaultConfig::from_env(env).unwrap();
        assert!(matches!(
            Transit::connect(&c, "transit"),
            Err(VaultError::BadAddress { .. })
        ));
    }

    #[test]
    fn public_keys_are_checked_like_the_pinned_keys_file() {
        let k = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]).verifying_key();
        assert_eq!(parse_public_key(&STANDARD.encode(k.as_bytes())), Ok(k));
        assert!(parse_public_key("AAAA").unwrap_err().contains("32"));
    }

    #[test]
    fn pinning_never_lowers_a_minimum_and_rejects_a_changed_key() {
        let k1 = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]).verifying_key();
        let k2 = ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]).verifying_key();
        let info = TransitPublicKeys {
            name: "t".into(),
            versions: BTreeMap::from([(1, k1), (2, k2)]),
            latest_version: 2,
            min_decryption_version: 1,
        };
        let mut keys = PinnedKeys::new();
        keys.pin("t", 1, k1).unwrap();
        keys.set_min_version("t", 2).unwrap();
        let r = info.pin_into(&mut keys).unwrap();
        assert_eq!(
            (r.added, r.unchanged, r.min_version),
            (vec![2], vec![1], Some(2))
        );

        let mut forged = info.clone();
        forged.versions.insert(1, k2);
        let before = keys.clone();
        assert!(matches!(
            forged.pin_into(&mut keys),
            Err(PinError::Conflict { version: 1, .. })
        ));
        assert_eq!(keys, before);
    }
}

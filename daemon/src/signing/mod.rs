//! Tier-map signing: Vault/OpenBao transit, the local development signer, pinned-key files.
//!
//! - [`vault`]: a transit client (`VAULT_ADDR`/`VAULT_TOKEN`, also `BAO_*`) that signs a map and
//!   fetches a key's public keys (every version) for pinning.
//! - [`dev`]: the development key `cmdgate up` uses, created on first run and pinned.
//! - [`sign_file`]: signs a map file in place (revision bump, self-check, atomic write).
//! - [`files`]: atomic writes and the pinned-keys (`trusted-keys`) file.
//!
//! Verification itself is `cmdgate_policy::tiermap::verify`: pure, pinned keys only.

pub mod dev;
pub mod files;
pub mod revision;
pub mod sign_file;
pub mod vault;

pub use dev::{ensure_dev_key_in, DevKey, DevKeyError, DEV_KEY_NAME, DEV_KEY_VERSION};
pub use files::{load_pinned_keys, save_pinned_keys, FileError};
pub use sign_file::{sign_file, SignConfig, SignError, Signed, Signer};
pub use vault::{
    TlsVerify, Transit, TransitPublicKeys, VaultConfig, VaultError, DEFAULT_TRANSIT_MOUNT,
};

use std::path::{Path, PathBuf};

/// The operator's config dir, looked up as `cmdgate_policy::locations::Locations` does:
/// `CMDGATE_CONFIG_DIR`, else `/etc/cmdgate` in system mode (`CMDGATE_MODE=system`), else
/// `$XDG_CONFIG_HOME/cmdgate`, else `~/.config/cmdgate`.
pub fn config_dir_from_env(var: impl Fn(&str) -> Option<String>) -> PathBuf {
    let var = |k: &str| var(k).filter(|v| !v.is_empty());
    if let Some(d) = var("CMDGATE_CONFIG_DIR") {
        return PathBuf::from(d);
    }
    if var("CMDGATE_MODE").as_deref() == Some("system") {
        return PathBuf::from("/etc/cmdgate");
    }
    match var("XDG_CONFIG_HOME") {
        Some(x) => Path::new(&x).join("cmdgate"),
        None => {
            Path::new(&var("HOME").unwrap_or_else(|| "/nonexistent".into())).join(".config/cmdgate")
        }
    }
}

/// The pinned-keys file in a config dir.
pub fn trusted_keys_path(config_dir: &Path) -> PathBuf {
    config_dir.join("trusted-keys")
}

/// Loads or creates the development key in `config_dir` and pins it in its `trusted-keys`.
pub fn ensure_dev_key(config_dir: &Path) -> Result<DevKey, DevKeyError> {
    ensure_dev_key_in(config_dir, &trusted_keys_path(config_dir))
}

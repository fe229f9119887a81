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

use cmdgate_policy::locations::{Locations, TRUSTED_KEYS_FILE};
use std::path::{Path, PathBuf};

/// The pinned-keys file in a config dir (the same file as `Locations::trusted_keys`).
pub fn trusted_keys_path(config_dir: &Path) -> PathBuf {
    config_dir.join(TRUSTED_KEYS_FILE)
}

/// Loads or creates the development key in `config_dir` and pins it in its `trusted-keys`.
pub fn ensure_dev_key(config_dir: &Path) -> Result<DevKey, DevKeyError> {
    ensure_dev_key_in(config_dir, &trusted_keys_path(config_dir))
}

/// [`ensure_dev_key`] in the operator's config dir as `Locations` resolves it.
pub fn ensure_dev_key_at(locations: &Locations) -> Result<DevKey, DevKeyError> {
    ensure_dev_key_in(
        Path::new(&locations.config_dir),
        Path::new(&locations.trusted_keys()),
    )
}

//! The local development signer: an ed25519 key kept in the config dir, pinned on first use.
//!
//! `cmdgate up` and `cmdgate init --sign` use it so a project works out of the box without Vault.
//! It writes the same trailer as Vault transit (`vault:v1:<base64>`), so the daemon and hook verify
//! both the same way, against the pinned keys only. Whoever can read the key file can sign maps: in
//! user mode that includes the agent (see "Trust boundaries" in the design); use Vault for real
//! protection.

use super::files::{self, FileError};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cmdgate_policy::tiermap::{PinError, PinnedKeys};
use ed25519_dalek::SigningKey;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Name of the development key in trailers and in the pinned-keys file.
pub const DEV_KEY_NAME: &str = "cmdgate-dev";
/// The development key has a single version; it is never rotated (delete the file and the pin to
/// start over).
pub const DEV_KEY_VERSION: u32 = 1;
/// File in the config dir holding the secret key (mode 0600).
pub const DEV_KEY_FILE: &str = "dev-signing-key";

const HEADER: &str =
    "# cmdgate development tier-map signing key: ed25519 secret, standard base64. Keep private.\n";

/// Why the development key could not be loaded, created or pinned.
#[derive(Debug, thiserror::Error)]
pub enum DevKeyError {
    /// Reading or writing the key or pinned-keys file failed.
    #[error(transparent)]
    File(#[from] FileError),
    /// The key file is readable or writable by others: someone else may have the key.
    #[error("{} has mode {mode:o}: it must be private to its owner (chmod 600)", path.display())]
    Permissions { path: PathBuf, mode: u32 },
    /// The key file does not hold a 32-byte secret in standard base64.
    #[error("{} does not hold a base64 ed25519 secret key", path.display())]
    Malformed { path: PathBuf },
    /// The operating system could not provide randomness for a new key.
    #[error("failed to get randomness for a new key: {0}")]
    Random(getrandom::Error),
    /// The pinned-keys file already pins another public key as the development key.
    #[error("cannot pin the development key in {}", path.display())]
    Pin {
        path: PathBuf,
        #[source]
        source: PinError,
    },
}

/// The development signing key, ready to sign with `cmdgate_policy::tiermap::sign`.
#[derive(Debug)]
pub struct DevKey {
    /// The secret key.
    pub signing_key: SigningKey,
    /// Always [`DEV_KEY_NAME`]; carried so callers never spell it themselves.
    pub name: String,
    /// Always [`DEV_KEY_VERSION`].
    pub version: u32,
    /// Whether this call generated the key (first run), so the caller can tell the operator.
    pub created: bool,
    /// Whether this call added the public key to the pinned-keys file.
    pub newly_pinned: bool,
}

/// Loads the development key from `config_dir`, generating it on first use (mode 0600, written
/// atomically), and makes sure its public key is pinned in `trusted_keys` (written atomically).
/// Two processes racing on first use end up with one key.
pub fn ensure_dev_key_in(config_dir: &Path, trusted_keys: &Path) -> Result<DevKey, DevKeyError> {
    files::ensure_dir(config_dir, files::CONFIG_DIR_MODE)?;
    let path = config_dir.join(DEV_KEY_FILE);
    let mut created = false;
    if !path.exists() {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).map_err(DevKeyError::Random)?;
        let text = format!("{HEADER}{}\n", STANDARD.encode(seed));
        created = files::create_atomic(&path, text.as_bytes(), key_mode(config_dir))?;
    }
    let signing_key = load(&path)?;

    let _lock = files::lock_pinned_keys(trusted_keys)?;
    let mut keys = files::load_pinned_keys(trusted_keys)?;
    let public = signing_key.verifying_key();
    let newly_pinned = keys
        .key(DEV_KEY_NAME)
        .and_then(|k| k.version(DEV_KEY_VERSION))
        .is_none();
    keys.pin(DEV_KEY_NAME, DEV_KEY_VERSION, public)
        .map_err(|source| DevKeyError::Pin {
            path: trusted_keys.to_path_buf(),
            source,
        })?;
    if newly_pinned {
        files::save_pinned_keys(trusted_keys, &keys)?;
    }
    Ok(DevKey {
        signing_key,
        name: DEV_KEY_NAME.to_owned(),
        version: DEV_KEY_VERSION,
        created,
        newly_pinned,
    })
}

/// Whether `dir` is a config dir its group shares (system mode: `/etc/cmdgate` is
/// `root:cmdgate-operators` with the setgid bit, so every operator can sign without root).
fn shared_dir(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.mode() & 0o2000 != 0)
        .map(|m| m.gid())
}

/// The development key's mode: 0600, or 0640 in a shared (setgid) config dir, whose group (the
/// operators) may sign with it.
fn key_mode(config_dir: &Path) -> u32 {
    if shared_dir(config_dir).is_some() {
        0o640
    } else {
        0o600
    }
}

/// Reads the key file, refusing one that others could read or write (group read only in a shared
/// config dir, and only for that dir's group).
fn load(path: &Path) -> Result<SigningKey, DevKeyError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|source| FileError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    let group_may_read = path
        .parent()
        .and_then(shared_dir)
        .is_some_and(|gid| gid == meta.gid());
    let forbidden = if group_may_read { 0o037 } else { 0o077 };
    if mode & forbidden != 0 {
        return Err(DevKeyError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let malformed = || DevKeyError::Malformed {
        path: path.to_path_buf(),
    };
    let text = files::read_text(path)?.ok_or_else(malformed)?;
    let b64 = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(malformed)?;
    let seed: [u8; 32] = STANDARD
        .decode(b64)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(malformed)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Whether `keys` pins exactly this development key (used by `cmdgate doctor`-style checks).
pub fn is_pinned(keys: &PinnedKeys, key: &DevKey) -> bool {
    keys.key(&key.name)
        .and_then(|k| k.version(key.version))
        .is_some_and(|p| *p == key.signing_key.verifying_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmdgate_policy::tiermap::{sign, verify, STARTER_MAP};
    use std::fs;

    #[test]
    fn first_run_creates_a_private_key_and_pins_it_second_run_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("cfg");
        let trusted = cfg.join("trusted-keys");
        let a = ensure_dev_key_in(&cfg, &trusted).unwrap();
        assert!(a.created && a.newly_pinned);
        let mode = fs::metadata(cfg.join(DEV_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = ensure_dev_key_in(&cfg, &trusted).unwrap();
        assert!(!b.created && !b.newly_pinned);
        assert_eq!(a.signing_key.to_bytes(), b.signing_key.to_bytes());

        let keys = files::load_pinned_keys(&trusted).unwrap();
        assert!(is_pinned(&keys, &b));
        let signed = sign(STARTER_MAP, &b.name, b.version, &b.signing_key).unwrap();
        let v = verify(&signed, &keys).unwrap();
        assert_eq!((v.key.as_str(), v.key_version), (DEV_KEY_NAME, 1));
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = dir.path().join("trusted-keys");
        ensure_dev_key_in(dir.path(), &trusted).unwrap();
        let key = dir.path().join(DEV_KEY_FILE);
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        let err = ensure_dev_key_in(dir.path(), &trusted).unwrap_err();
        assert!(
            matches!(err, DevKeyError::Permissions { mode: 0o644, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_different_pinned_dev_key_is_a_conflict_not_an_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = dir.path().join("trusted-keys");
        let mut keys = PinnedKeys::new();
        let other = SigningKey::from_bytes(&[7u8; 32]);
        keys.pin(DEV_KEY_NAME, 1, other.verifying_key()).unwrap();
        files::save_pinned_keys(&trusted, &keys).unwrap();
        let before = fs::read(&trusted).unwrap();
        let err = ensure_dev_key_in(dir.path(), &trusted).unwrap_err();
        assert!(matches!(err, DevKeyError::Pin { .. }), "{err}");
        assert_eq!(fs::read(&trusted).unwrap(), before);
    }
}

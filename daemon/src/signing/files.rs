//! Operator files written by signing and trust commands: atomic writes and the pinned-keys file.
//!
//! Every write goes to a temporary file in the same directory, is flushed to disk, then renamed
//! over the target, so a reader (the hook, the daemon) sees the old file or the new one, never half
//! of either, and a failure leaves the old file byte-identical.

use cmdgate_policy::tiermap::{Diagnostic, PinnedKeys};
use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an operator file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An IO step failed; `action` says which ("read", "write", "rename", ...).
    #[error("failed to {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },
    /// The pinned-keys file does not parse; every problem is listed with its line.
    #[error("pinned keys in {} are invalid:\n{}", path.display(), lines(diagnostics))]
    InvalidPinnedKeys {
        path: PathBuf,
        diagnostics: Vec<Diagnostic>,
    },
}

fn lines(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("  {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Mode of a config dir cmdgate creates: others may read it, because the hook (the agent's uid, in
/// system mode) must read the pinned keys; secrets in it (the development key) are 0600 files.
pub const CONFIG_DIR_MODE: u32 = 0o755;

/// Creates `dir` and its missing parents with `mode` (an existing directory is left as it is).
pub fn ensure_dir(dir: &Path, mode: u32) -> Result<(), FileError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(io_err("create directory", dir))
}

/// A temporary file next to `path`, created exclusively with exactly `mode` (umask does not apply).
fn temp_beside(path: &Path, mode: u32) -> Result<(File, PathBuf), FileError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.as_deref().unwrap_or("cmdgate"),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err("create", &tmp))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("set permissions of", &tmp))?;
    Ok((file, tmp))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes the temporary file fully and durably; removes it on failure.
fn write_temp(path: &Path, contents: &[u8], mode: u32) -> Result<PathBuf, FileError> {
    let (mut file, tmp) = temp_beside(path, mode)?;
    let written = file
        .write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(io_err("write", &tmp));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

/// Makes the rename itself durable. Best effort: not every filesystem lets a directory be synced.
fn sync_dir(path: &Path) {
    if let Ok(d) = File::open(parent(path)) {
        let _ = d.sync_all();
    }
}

/// Replaces `path` with `contents` atomically (temporary file + rename), file mode `mode`.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), FileError> {
    let tmp = write_temp(path, contents, mode)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("rename a temporary file onto", path)(e));
    }
    sync_dir(path);
    Ok(())
}

/// Creates `path` with `contents` atomically unless it already exists (hard link, which never
/// replaces). Returns whether this call created it: two racing callers never both win.
pub fn create_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<bool, FileError> {
    let tmp = write_temp(path, contents, mode)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(path);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("create", path)(e)),
    }
}

/// Reads a UTF-8 text file; `Ok(None)` when it does not exist.
pub fn read_text(path: &Path) -> Result<Option<String>, FileError> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FileError::NotUtf8 {
                path: path.to_path_buf(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// Reads the pinned-keys file. A missing file is "no keys pinned" (every map then fails to verify:
/// the fail-closed outcome); a malformed one is an error naming every problem with its line.
pub fn load_pinned_keys(path: &Path) -> Result<PinnedKeys, FileError> {
    let Some(text) = read_text(path)? else {
        return Ok(PinnedKeys::new());
    };
    PinnedKeys::parse(&text).map_err(|diags| FileError::InvalidPinnedKeys {
        path: path.to_path_buf(),
        diagnostics: diags
            .into_iter()
            .map(|d| d.in_file(&path.display().to_string()))
            .collect(),
    })
}

/// Writes the pinned-keys file atomically (mode 0644: public keys, readable by the hook), creating
/// its directory ([`CONFIG_DIR_MODE`]) when missing.
pub fn save_pinned_keys(path: &Path, keys: &PinnedKeys) -> Result<(), FileError> {
    ensure_dir(parent(path), CONFIG_DIR_MODE)?;
    write_atomic(path, keys.to_file_string().as_bytes(), 0o644)
}

/// Held while a pinned-keys file is read, changed and written, so two writers (`cmdgate trust add`
/// and `cmdgate up` pinning the development key, say) never lose each other's pins. Released on drop.
#[derive(Debug)]
pub struct PinnedKeysLock {
    /// The advisory lock on `<trusted-keys>.lock`.
    _lock: Flock<File>,
}

/// Takes the update lock of the pinned-keys file `path` (waits for another holder), creating the
/// directory and the lock file when missing.
pub fn lock_pinned_keys(path: &Path) -> Result<PinnedKeysLock, FileError> {
    ensure_dir(parent(path), CONFIG_DIR_MODE)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = parent(path).join(name);
    // Opened for reading when it exists: flock needs no write access, and in a shared config dir
    // (system mode) the lock file belongs to whichever operator made it first.
    let file = match OpenOptions::new().read(true).open(&lock_path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&lock_path)
            .map_err(io_err("create", &lock_path))?,
        Err(e) => return Err(io_err("open", &lock_path)(e)),
    };
    let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| FileError::Io {
        action: "lock",
        path: lock_path.clone(),
        source: io::Error::from(errno),
    })?;
    Ok(PinnedKeysLock { _lock: lock })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn create_atomic_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        assert!(create_atomic(&p, b"first", 0o600).unwrap());
        assert!(!create_atomic(&p, b"second", 0o600).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"first");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn concurrent_pinners_lose_no_pin() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trusted-keys");
        let threads: Vec<_> = (0..8u8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let _lock = lock_pinned_keys(&p).unwrap();
                    let mut keys = load_pinned_keys(&p).unwrap();
                    let k = ed25519_dalek::SigningKey::from_bytes(&[i + 1; 32]).verifying_key();
                    keys.pin(&format!("k{i}"), 1, k).unwrap();
                    save_pinned_keys(&p, &keys).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(load_pinned_keys(&p).unwrap().keys().count(), 8);
    }

    #[test]
    fn missing_pinned_keys_file_means_no_keys() {
        let dir = tempfile::tempdir().unwrap();
        let keys = load_pinned_keys(&dir.path().join("trusted-keys")).unwrap();
        assert!(keys.is_empty());
    }

    #[test]
    fn malformed_pinned_keys_name_the_path_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trusted-keys");
        fs::write(&p, "# ok\nk v1 not-base64\n").unwrap();
        let err = load_pinned_keys(&p).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:2:", p.display())), "{err}");
    }
}

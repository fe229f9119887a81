//! Tier maps per project: `CLAUDE_CMDS.md` read, verified against the pinned keys, checked against
//! the highest revision stored for that project and key, and cached.
//!
//! The cache is keyed by the file's identity (size, mtime, inode) and then by content hash, so an
//! edit is picked up on the next request without a restart, and an unchanged file costs one
//! `stat`. A new content that fails (half-written, unsigned, forged, replayed) never activates, and
//! neither does the last valid revision while that content is on disk: the project is read-only with
//! the reason (README: no valid map ⇒ read-only) until the operator re-signs the file or restores the
//! signed one. Each failure is reported (status, one audit row per content).
//!
//! Every accepted revision is also published for the hook, which keeps no state of its own:
//! `<data dir>/tiermap-revisions` (`Locations::tiermap_revisions`, format in
//! `cmdgate_policy::tiermap::published`) holds each project's highest accepted revision, rewritten
//! whole (tmp + rename; 0640 for the agents' group `peers.publish_gid`, else 0600) after every
//! record and once at start from the store, so the hook never uses a replayed map's tier 0 to allow
//! a command by itself.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cmdgate_policy::breaker::Integrity;
use cmdgate_policy::tiermap::published::{self, Published};
use cmdgate_policy::tiermap::{
    self, check_revision, ContentHash, PinnedKeys, ReplayError, Snapshot, VerifyError,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::store::audit::TiermapEvent;
use crate::store::{state, Store, StoreError};

/// A file's identity: if none of these changed, neither did the content we read last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
}

/// The keys' and a project map's stamps, taken together off the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamps {
    keys: Option<Stamp>,
    map: Option<Stamp>,
}

fn stamps_of(keys_path: &Path, root: &Path) -> Stamps {
    Stamps {
        keys: stamp(keys_path),
        map: stamp(&root.join(tiermap::FILE_NAME)),
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    // The entry itself, not a link's target: a link put in its place is a change.
    let m = std::fs::symlink_metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        ino: m.ino(),
        dev: m.dev(),
    })
}

/// The map file's text: `None` when there is none. The map is the regular file at the project root
/// itself: a symbolic link (a map written through a link, or one kept elsewhere) or a file with
/// other hard links (writable under another name) is refused, never followed.
fn read_map(file: &Path) -> Option<Result<String, String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(file);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Some(Err(format!(
                "{} is a symbolic link; the tier map must be the file itself",
                file.display()
            )))
        }
        Err(e) => return Some(Err(format!("cannot read {}: {e}", file.display()))),
    };
    let checked = f
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", file.display()));
    Some(checked.and_then(|m| {
        if !m.is_file() {
            return Err(format!("{} is not a regular file", file.display()));
        }
        if m.nlink() > 1 {
            return Err(format!(
                "{} has {} hard links; the tier map must have no other name",
                file.display(),
                m.nlink()
            ));
        }
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", file.display()))
    }))
}

/// The pinned keys, reloaded when their file changes.
struct Keys {
    path: PathBuf,
    stamp: Option<Stamp>,
    /// Bumped on every reload: cached project snapshots verified under older keys are re-checked.
    generation: u64,
    keys: Result<Arc<PinnedKeys>, String>,
}

struct Project {
    stamp: Option<Stamp>,
    keys_generation: u64,
    /// Hash of the raw content last read (`None`: no file).
    content: Option<ContentHash>,
    active: Arc<Snapshot>,
    /// The last verified snapshot, named in the reason while newer content fails (never used).
    last_valid: Option<Arc<Snapshot>>,
    /// Why the current file content is not the active one.
    problem: Option<String>,
}

/// Something about a project's map worth an audit row (and, for integrity events, the breaker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapEvent {
    pub project: String,
    pub what: TiermapEvent,
    pub detail: String,
    pub revision: Option<u64>,
    #[serde(skip)]
    pub integrity: Option<Integrity>,
}

/// A project's snapshot for one decision, and what loading it found.
pub struct Loaded {
    pub snapshot: Arc<Snapshot>,
    pub event: Option<MapEvent>,
}

/// A project's map state for `cmdgate status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectStatus {
    pub project: String,
    pub active: String,
    pub revision: Option<u64>,
    pub problem: Option<String>,
}

/// The per-project cache.
pub struct TierMaps {
    /// The pinned keys file (the same as `Keys::path`, readable without the lock).
    keys_path: PathBuf,
    keys: Mutex<Keys>,
    projects: Mutex<HashMap<PathBuf, Project>>,
    /// Where accepted revisions are published for the hook (`None`: not published, unit tests),
    /// and the group the file is given to (`peers.publish_gid`).
    published: Option<(PathBuf, Option<u32>)>,
    /// Serialises publishing, so an older read of the store never overwrites a newer file.
    publish_lock: Mutex<()>,
}

/// Runs `f` (file-system calls) on the blocking pool; `Err` when the pool could not run it (a
/// panic, the runtime shutting down).
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    tokio::task::spawn_blocking(f).await
}

/// The answer of a call whose files could not be read: read-only, with the reason.
fn unreadable(e: &tokio::task::JoinError) -> Loaded {
    Loaded {
        snapshot: Arc::new(Snapshot::read_only(format!(
            "the tier map could not be read ({e})"
        ))),
        event: None,
    }
}

/// Writes `text` to `path` whole: a fresh temp file beside it, fsync, rename over `path`. It lists
/// every project path, so it is readable only by who needs it: with `gid` (system mode: the agents'
/// group, whose hooks read it) mode 0640 and that group; without, 0600 (user mode: the hook runs as
/// the daemon's uid). With `gid`, a file that cannot be given to the group is not published, and the
/// old one is removed: a stale record would let a replayed map's tier 0 through where a missing one
/// makes the system-mode hook refuse it.
fn write_published(path: &Path, text: &str, gid: Option<u32>) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mode = if gid.is_some() { 0o640 } else { 0o600 };
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        if gid.is_some() {
            std::os::unix::fs::fchown(&f, None, gid)?;
        }
        // The mode as meant, whatever the daemon's umask.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        if gid.is_some() {
            let _ = std::fs::remove_file(path);
        }
    }
    result
}

impl TierMaps {
    pub fn new(trusted_keys: PathBuf) -> TierMaps {
        TierMaps {
            keys_path: trusted_keys.clone(),
            keys: Mutex::new(Keys {
                path: trusted_keys,
                stamp: None,
                generation: 0,
                keys: Err("not loaded yet".into()),
            }),
            projects: Mutex::new(HashMap::new()),
            published: None,
            publish_lock: Mutex::new(()),
        }
    }

    /// Publishes accepted revisions to `path` (the daemon passes `Locations::tiermap_revisions`).
    pub fn publishing(mut self, path: PathBuf, gid: Option<u32>) -> TierMaps {
        self.published = Some((path, gid));
        self
    }

    /// Rewrites the published revisions from the store: at start (so the file is right before the
    /// first request) and after every recorded revision. A store error is returned; a file that
    /// cannot be written is reported on stderr (the daemon's own replay check still applies, but
    /// the hook may then see an older record until the next successful write).
    pub async fn publish(&self, store: &Store) -> Result<(), StoreError> {
        let Some((path, gid)) = self.published.clone() else {
            return Ok(());
        };
        let _serial = self.publish_lock.lock().await;
        let rows = store.read(state::highest_revisions).await?;
        let entries: Vec<Published> = rows
            .into_iter()
            .map(|(root, seen)| Published { root, seen })
            .collect();
        let text = published::render(&entries);
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || write_published(&target, &text, gid))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        if let Err(e) = written {
            eprintln!(
                "cmdgated: cannot publish accepted tier map revisions to {}: {e}; the hook may \
                 use an older map's tier 0 until this succeeds",
                path.display()
            );
        }
        Ok(())
    }

    /// The pinned keys as of `now` (their file's stamp, taken by the caller off the runtime);
    /// re-read on the blocking pool when the stamp changed. A read the pool could not run is an
    /// error for this call only (not cached: the next call reads again).
    async fn keys(&self, now: Option<Stamp>) -> (u64, Result<Arc<PinnedKeys>, String>) {
        let mut k = self.keys.lock().await;
        if now != k.stamp || k.generation == 0 {
            let path = k.path.clone();
            let read = match off_runtime(move || std::fs::read_to_string(&path)).await {
                Ok(read) => read,
                Err(e) => {
                    return (
                        k.generation,
                        Err(format!("cannot read pinned keys {}: {e}", k.path.display())),
                    )
                }
            };
            k.keys = match read {
                Ok(text) => PinnedKeys::parse(&text).map(Arc::new).map_err(|diags| {
                    let lines: Vec<String> = diags
                        .into_iter()
                        .map(|d| d.in_file(&k.path.to_string_lossy()).to_string())
                        .collect();
                    format!("pinned keys are invalid: {}", lines.join("; "))
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Ok(Arc::new(PinnedKeys::new()))
                }
                Err(e) => Err(format!("cannot read pinned keys {}: {e}", k.path.display())),
            };
            k.stamp = now;
            k.generation += 1;
        }
        (k.generation, k.keys.clone())
    }

    /// The stamps of the pinned keys and of `root`'s map: file-system calls, so the caller runs
    /// this off the async runtime (the decision pipeline takes them in the same trip off the
    /// runtime's workers as its other file-system work, `decide::off_runtime`).
    pub(crate) fn stamps(&self, root: &Path) -> Stamps {
        stamps_of(&self.keys_path, root)
    }

    /// The cached snapshot for `root` when `stamps` show that neither the keys nor the map
    /// changed since it was verified: exactly the case in which `get_stamped` returns the cache
    /// without reading anything. `None` otherwise, and when a lock is held (a load in progress):
    /// the caller then goes through `get_stamped`. Never blocks, so it may run on any thread.
    pub(crate) fn cached(&self, root: &Path, stamps: &Stamps) -> Option<Arc<Snapshot>> {
        let keys = self.keys.try_lock().ok()?;
        if keys.generation == 0 || keys.stamp != stamps.keys {
            return None;
        }
        let projects = self.projects.try_lock().ok()?;
        let p = projects.get(root)?;
        (p.stamp == stamps.map && p.keys_generation == keys.generation).then(|| p.active.clone())
    }

    /// The snapshot for `root` (canonical project root).
    ///
    /// Every file-system call runs on the blocking pool, never on the async runtime: the keys'
    /// and the map's stamps in one trip (all an unchanged map costs), the file when it changed.
    /// A trip the pool could not make is a read-only snapshot for this call, never cached.
    pub async fn get(&self, root: &Path, store: &Store) -> Result<Loaded, StoreError> {
        let stamps = {
            let (keys_path, root) = (self.keys_path.clone(), root.to_path_buf());
            off_runtime(move || stamps_of(&keys_path, &root)).await
        };
        match stamps {
            Ok(s) => self.get_stamped(root, s, store).await,
            Err(e) => Ok(unreadable(&e)),
        }
    }

    /// `get` with the stamps already taken (off the runtime) by the caller.
    pub(crate) async fn get_stamped(
        &self,
        root: &Path,
        stamps: Stamps,
        store: &Store,
    ) -> Result<Loaded, StoreError> {
        let file = root.join(tiermap::FILE_NAME);
        let Stamps {
            keys: keys_now,
            map: now,
        } = stamps;
        let (generation, keys) = self.keys(keys_now).await;
        let mut projects = self.projects.lock().await;
        if let Some(p) = projects.get(root) {
            // Same identity (or still no file) under the same keys: nothing to re-check.
            if p.stamp == now && p.keys_generation == generation {
                return Ok(Loaded {
                    snapshot: p.active.clone(),
                    event: None,
                });
            }
        }
        let project = root.to_string_lossy().into_owned();
        let text = match off_runtime(move || read_map(&file)).await {
            Ok(text) => text,
            // The cache keeps what it had: the next call reads again.
            Err(e) => return Ok(unreadable(&e)),
        };
        let content = match &text {
            Some(Ok(t)) => Some(tiermap::content_hash(t)),
            Some(Err(_)) | None => None,
        };
        let previous = match projects.remove(root) {
            Some(mut p)
                if p.content.is_some()
                    && p.content == content
                    && p.keys_generation == generation =>
            {
                // Touched but not changed.
                p.stamp = now;
                let snapshot = p.active.clone();
                projects.insert(root.to_path_buf(), p);
                return Ok(Loaded {
                    snapshot,
                    event: None,
                });
            }
            other => other,
        };
        let last_valid = previous.as_ref().and_then(|p| p.last_valid.clone());
        // Decide what this content is worth.
        let outcome: Result<Snapshot, (String, Option<Integrity>)> = match (&keys, &text) {
            (Err(e), _) => Err((e.clone(), None)),
            (Ok(_), None) => Err(("no CLAUDE_CMDS.md in the project".into(), None)),
            (Ok(_), Some(Err(e))) => Err((e.clone(), None)),
            (Ok(keys), Some(Ok(text))) => match tiermap::verify(text, keys) {
                Err(e) => {
                    let integrity = match e {
                        VerifyError::NoTrailer
                        | VerifyError::TooLarge { .. }
                        | VerifyError::InvalidMap(_) => None,
                        _ => Some(Integrity::BadSignature),
                    };
                    Err((format!("tier map rejected: {e}"), integrity))
                }
                Ok(v) => {
                    let (p, k) = (project.clone(), v.key.clone());
                    let seen = store.read(move |c| state::seen_revision(c, &p, &k)).await?;
                    match check_revision(v.revision, &v.content_hash, seen.as_ref()) {
                        Err(
                            e @ (ReplayError::Rollback { .. } | ReplayError::RevisionReused { .. }),
                        ) => Err((
                            format!("tier map rejected: {e}"),
                            Some(Integrity::ReplayedMap),
                        )),
                        Ok(()) => {
                            let (p, k, s) = (project.clone(), v.key.clone(), v.seen());
                            let at = crate::clock::now_ms();
                            store
                                .write(move |c| state::record_revision(c, &p, &k, &s, at))
                                .await?;
                            self.publish(store).await?;
                            Ok(Snapshot::Verified(v))
                        }
                    }
                }
            },
        };
        let (entry, event) = match outcome {
            Ok(snapshot) => {
                let revision = snapshot.revision();
                let detail = snapshot.to_string();
                let active = Arc::new(snapshot);
                (
                    Project {
                        stamp: now,
                        keys_generation: generation,
                        content,
                        active: active.clone(),
                        last_valid: Some(active),
                        problem: None,
                    },
                    MapEvent {
                        project: project.clone(),
                        what: TiermapEvent::Accepted,
                        detail,
                        revision,
                        integrity: None,
                    },
                )
            }
            Err((reason, integrity)) => {
                // Whatever failed, the project is read-only: the file on disk is what the agent and
                // the operator see, and an edit nobody signed must not leave an older grant running.
                // The last valid revision is named so the operator knows what a restore brings back.
                let why = match (&last_valid, &text) {
                    (Some(s), Some(_)) => format!(
                        "{reason} (the last valid map, {s}, is not used while this file is on disk: \
                         re-sign it or restore the signed one)"
                    ),
                    _ => reason.clone(),
                };
                let active = Arc::new(Snapshot::read_only(why.clone()));
                let detail = format!("{why}; the project is read-only");
                (
                    Project {
                        stamp: now,
                        keys_generation: generation,
                        content,
                        active: active.clone(),
                        last_valid,
                        problem: Some(reason),
                    },
                    MapEvent {
                        project: project.clone(),
                        what: TiermapEvent::Rejected,
                        detail,
                        revision: active.revision(),
                        integrity,
                    },
                )
            }
        };
        let snapshot = entry.active.clone();
        projects.insert(root.to_path_buf(), entry);
        Ok(Loaded {
            snapshot,
            event: Some(event),
        })
    }

    /// Every cached project, for `status`.
    pub async fn status(&self) -> Vec<ProjectStatus> {
        let projects = self.projects.lock().await;
        let mut out: Vec<ProjectStatus> = projects
            .iter()
            .map(|(root, p)| ProjectStatus {
                project: root.to_string_lossy().into_owned(),
                active: p.active.to_string(),
                revision: p.active.revision(),
                problem: p.problem.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.project.cmp(&b.project));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cached` answers exactly when `get_stamped` would return the cache without reading: the
    /// same snapshot under the same stamps, nothing after the map or the keys changed, nothing
    /// while a load holds the lock.
    #[tokio::test]
    async fn cached_holds_only_for_unchanged_stamps() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(crate::store::DB_FILE)).unwrap();
        let keys = dir.path().join("trusted_keys");
        let root = dir.path().join("proj");
        std::fs::create_dir(&root).unwrap();
        let maps = TierMaps::new(keys.clone());
        let stamps = maps.stamps(&root);
        assert!(maps.cached(&root, &stamps).is_none(), "nothing loaded yet");
        let loaded = maps.get_stamped(&root, stamps, &store).await.unwrap();
        assert!(loaded.event.is_some(), "no map: a rejection to audit");
        let hit = maps.cached(&root, &maps.stamps(&root)).expect("unchanged");
        assert!(Arc::ptr_eq(&hit, &loaded.snapshot));
        // A map appears: its stamp differs from the cached one.
        std::fs::write(root.join(tiermap::FILE_NAME), "# a map\n").unwrap();
        assert!(maps.cached(&root, &maps.stamps(&root)).is_none());
        std::fs::remove_file(root.join(tiermap::FILE_NAME)).unwrap();
        assert!(maps.cached(&root, &maps.stamps(&root)).is_some());
        // Keys appear: every cached snapshot is re-checked.
        std::fs::write(&keys, "").unwrap();
        assert!(maps.cached(&root, &maps.stamps(&root)).is_none());
        std::fs::remove_file(&keys).unwrap();
        // A load in progress holds the lock: the caller waits on `get_stamped` instead.
        let stamps = maps.stamps(&root);
        let held = maps.projects.lock().await;
        assert!(maps.cached(&root, &stamps).is_none());
        drop(held);
        assert!(maps.cached(&root, &stamps).is_some());
    }
}

//! Where a mirrored run keeps its upper dir and where commits keep their journal: on the
//! workspace's own mount, outside the workspace tree, in a root-only directory.
//!
//! Why there: a commit moves the run's new files into the workspace with `rename(2)`, which only
//! works within one mount (O(files), whatever the bytes), and a journaled pre-image is the old
//! file renamed away (atomic, same inode). overlayfs refuses an upper dir inside its lower tree
//! (overlapping layers), and the agent must not reach the upper dir between the run and its
//! commit (it would change what gets committed), hence outside the workspace and mode 0700.
//!
//! The place: `<state dir>/mirror` when the state dir is on the workspace's mount (the usual
//! case: both under /home, or both on /), else `<mount point>/.cmdgate-mirror` at the root of
//! the workspace's mount. A workspace that is itself the root of its mount (a bind-mounted
//! project in a container) has no such place: mirrored runs are refused there, with that reason.
//! Every root used is listed in `<state dir>/mirror-roots`, so recovery finds them all.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why no store could be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The workspace's mount has no place outside the workspace.
    #[error("the workspace {0} is the root of its mount: there is no place on it outside the workspace for the mirror's upper dir")]
    NoPlace(PathBuf),
    /// The store dir exists but is not a root-only directory we own.
    #[error("{0} is not a root-owned directory of mode 0700; refusing to keep runs there")]
    Unsafe(PathBuf),
    /// IO.
    #[error("failed to prepare {0}")]
    Io(PathBuf, #[source] std::io::Error),
}

/// A mirror store: `runs/<id>` (kept upper dirs), `journal/<id>` (commit journals), `pre/`
/// (pre-images of kept `write=` trees on this mount) and `trash/` (spent dirs being removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// The root-only directory (see the module docs for where).
    pub root: PathBuf,
}

impl Store {
    /// `root/runs`.
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }
    /// `root/journal`.
    pub fn journal(&self) -> PathBuf {
        self.root.join("journal")
    }
    /// `root/pre`: the journal dirs of kept `write=` trees on this mount (`<run id>-w<n>`), named
    /// by their run's manifest in the workspace's store; never a journal of their own.
    pub fn pre(&self) -> PathBuf {
        self.root.join("pre")
    }
    /// `root/trash`: spent directories on their way out (`trash`): never read, removed by the
    /// process that put them there or, after a crash, at the next start.
    pub fn trash(&self) -> PathBuf {
        self.root.join(crate::trash::TRASH)
    }
    /// The store whose `runs/` holds `run_dir` (a kept run's dir, the workspace's or a `write=`
    /// tree's `<id>-w<n>`).
    pub(crate) fn of_run_dir(run_dir: &Path) -> Option<Store> {
        let runs = run_dir.parent()?;
        (runs.file_name()? == "runs").then(|| Store {
            root: runs.parent().map(Path::to_path_buf).unwrap_or_default(),
        })
    }
}

/// The mount id of `path` (`statx` `STX_MNT_ID`): two paths can exchange entries by `rename`
/// only on the same mount, even when the device is the same (bind mounts).
pub fn mount_id(path: &Path) -> std::io::Result<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `stx` is a valid, writable statx buffer.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_SYNC_AS_STAT,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(std::io::Error::other(
            "the kernel reports no mount id (statx)",
        ));
    }
    Ok(stx.stx_mnt_id)
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Find (and create) the store for `workspace` (canonical). Records the root in
/// `<state_dir>/mirror-roots`.
pub fn for_workspace(workspace: &Path, state_dir: &Path) -> Result<Store, StoreError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| StoreError::Io(p, e)
    };
    std::fs::create_dir_all(state_dir).map_err(io(state_dir))?;
    let state_dir = state_dir.canonicalize().map_err(io(state_dir))?;
    let ws_mount = mount_id(workspace).map_err(io(workspace))?;
    let root = if mount_id(&state_dir).map_err(io(&state_dir))? == ws_mount
        && !overlaps(&state_dir, workspace)
    {
        state_dir.join("mirror")
    } else {
        let mut top = workspace.to_path_buf();
        while let Some(parent) = top.parent() {
            if mount_id(parent).map_err(io(parent))? != ws_mount {
                break;
            }
            top = parent.to_path_buf();
        }
        if top == workspace {
            return Err(StoreError::NoPlace(workspace.to_path_buf()));
        }
        top.join(".cmdgate-mirror")
    };
    if overlaps(&root, workspace) {
        return Err(StoreError::NoPlace(workspace.to_path_buf()));
    }
    let store = Store { root };
    for dir in [
        store.root.clone(),
        store.runs(),
        store.journal(),
        store.pre(),
        store.trash(),
    ] {
        root_only_dir(&dir)?;
    }
    remember(&state_dir, &store.root).map_err(io(&state_dir))?;
    Ok(store)
}

/// Create `dir` as root-only (0700, our uid), or check that it is one (never through a symlink).
fn root_only_dir(dir: &Path) -> Result<(), StoreError> {
    match std::fs::create_dir(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| StoreError::Io(dir.to_path_buf(), e))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(StoreError::Io(dir.to_path_buf(), e)),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| StoreError::Io(dir.to_path_buf(), e))?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(StoreError::Unsafe(dir.to_path_buf()));
    }
    Ok(())
}

fn roots_file(state_dir: &Path) -> PathBuf {
    state_dir.join("mirror-roots")
}

/// Append `root` to the list of roots (once).
fn remember(state_dir: &Path, root: &Path) -> std::io::Result<()> {
    if known_roots(state_dir).iter().any(|r| r == root) {
        return Ok(());
    }
    let mut line = root.as_os_str().as_bytes().to_vec();
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(roots_file(state_dir))?;
    f.write_all(&line)?;
    f.sync_all()
}

/// Every store root this state dir has used (for recovery and `runs`).
pub fn known_roots(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(bytes) = std::fs::read(roots_file(state_dir)) else {
        return Vec::new();
    };
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
        .collect()
}

/// Every store of this state dir whose root still exists and is root-only.
pub fn stores(state_dir: &Path) -> Vec<Store> {
    known_roots(state_dir)
        .into_iter()
        .filter(|r| std::fs::symlink_metadata(r).is_ok_and(|m| m.is_dir() && m.mode() & 0o077 == 0))
        .map(|root| Store { root })
        .collect()
}

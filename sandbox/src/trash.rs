//! Spent directories of a mirror store, removed off a run's path: a run's overlay work dirs once
//! it ended, its kept dir once committed or discarded. Removing a directory tree on the
//! workspace's filesystem is journaled metadata work and, on a filesystem mounted `discard`, a
//! blocking discard of every freed block; none of it need hold up the run's answer.
//!
//! [`dispose`] renames the directory into the store's `trash/` (one `renameat2` on the same
//! mount, `RENAME_NOREPLACE`, under a name no other entry has) and hands it to this process's
//! reaper thread, which removes it. What is in `trash/` is never read again: not by a commit, an
//! apply, `recover`'s scan of kept runs (`runs/` only), nor by any run (the store's root is
//! masked inside every mirror and is root-only on the host). A name in `trash/` is never a run
//! id (it carries a `.` and the disposing process's pid), so nothing there is taken for a live
//! or kept run. A process that ends before its reaper is done (a crash, a daemon stopped, the
//! helper's own exit without [`wait_idle`]) leaves entries that [`empty`] removes at the next
//! start (`commit::recover`).
//!
//! When the rename cannot be made (no `trash/`, a name taken, another filesystem), the
//! directory is removed in place, as before.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Condvar, Mutex, OnceLock};

/// The store's trash dir: `<store root>/trash` (see [`crate::store::Store::trash`]).
pub(crate) const TRASH: &str = "trash";

/// Removals handed to the reaper and not finished yet.
static PENDING: Mutex<usize> = Mutex::new(0);
static IDLE: Condvar = Condvar::new();
static REAPER: OnceLock<Mutex<Sender<PathBuf>>> = OnceLock::new();
/// Makes every name this process puts in a trash dir unique (with its pid).
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Remove `dir` (a directory of the store whose trash is `trash`) off the caller's path: renamed
/// into `trash` now, removed by the reaper thread later. Falls back to removing it in place.
/// A `dir` that does not exist is not an error.
pub(crate) fn dispose(dir: &Path, trash: &Path) -> std::io::Result<()> {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = format!("{base}.{}.{seq}", std::process::id());
    let target = trash.join(name);
    match nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        dir,
        nix::fcntl::AT_FDCWD,
        &target,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {
            reap(target);
            Ok(())
        }
        Err(nix::errno::Errno::ENOENT) if !dir.exists() => Ok(()),
        Err(_) => crate::mirror::remove_tree(dir),
    }
}

/// Hand `path` to the reaper thread (started on first use); removed in place if it cannot be.
fn reap(path: PathBuf) {
    if let Ok(mut n) = PENDING.lock() {
        *n += 1;
    }
    let sent = REAPER
        .get_or_init(|| Mutex::new(start_reaper()))
        .lock()
        .ok()
        .and_then(|tx| tx.send(path.clone()).ok());
    if sent.is_none() {
        let _ = crate::mirror::remove_tree(&path);
        done();
    }
}

fn done() {
    if let Ok(mut n) = PENDING.lock() {
        *n = n.saturating_sub(1);
        if *n == 0 {
            IDLE.notify_all();
        }
    }
}

fn start_reaper() -> Sender<PathBuf> {
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let spawned = std::thread::Builder::new()
        .name("store-reaper".into())
        .spawn(move || {
            for path in rx {
                let _ = crate::mirror::remove_tree(&path);
                done();
            }
        });
    if spawned.is_err() {
        // No thread: the receiver is gone, every send fails and `reap` removes in place.
        return mpsc::channel().0;
    }
    tx
}

/// Wait until every removal this process handed to its reaper is done (a helper process before
/// it exits; tests).
pub fn wait_idle() {
    let Ok(mut n) = PENDING.lock() else {
        return;
    };
    while *n > 0 {
        match IDLE.wait(n) {
            Ok(guard) => n = guard,
            Err(_) => return,
        }
    }
}

/// Remove everything in `trash` that another process put there (at start, before any run: what
/// a process left when it ended before its reaper; this process's own entries are its reaper's).
/// The entries removed, by name.
pub(crate) fn empty(trash: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(trash) else {
        return Vec::new();
    };
    let ours = format!(".{}.", std::process::id());
    rd.flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let own = name
                .rfind('.')
                .is_some_and(|end| name[..=end].ends_with(&ours));
            !own && remove_entry(&e.path()).is_ok()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Remove a trash entry, whatever its type (never following a symbolic link).
fn remove_entry(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path)?.is_dir() {
        true => crate::mirror::remove_tree(path),
        false => std::fs::remove_file(path),
    }
}

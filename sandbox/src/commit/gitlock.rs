//! Git's lock discipline at commit. A run's changes under the workspace's `.git/` (a `git add` or
//! `git commit` in the mirror: index, objects, refs, logs) are renamed in only while cmdgate holds
//! the repository's `index.lock`, taken the way git takes it (`O_CREAT | O_EXCL`, never through a
//! link): while it is held, a git on the host cannot start writing the index, and one that
//! already holds it — or holds `<file>.lock` for a file this commit changes (a ref, `HEAD`,
//! `packed-refs`) — is waited for, up to [`WAIT`], then the commit is a conflict that names the
//! lock. The lock is taken before the journal starts, so a commit is never half-applied around a
//! host git. A run that leaves a lock file of its own under `.git/` (a git that did not finish)
//! is refused: committing it would lock the user out of their repository.
//!
//! `undo` takes the same lock, with the same wait, when what it puts back reaches into `.git/`: a
//! host git holding it makes the undo a conflict that undoes nothing.
//!
//! The lock file says whose it is (`cmdgate commit RUN`, also for an undo of RUN); `recover`
//! removes it for a commit or an undo a crash interrupted (`release_stale`). Not covered: a crash between taking the lock and writing
//! the journal's manifest leaves a lock no journal names (git then says to remove it).

use super::fsx::{lstat_at, open_dir_at};
use super::Problem;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a commit waits for a host git to let go of the repository (`git status` refreshing
/// the index holds it for milliseconds; an interactive `git commit` for as long as its editor is
/// open, and that one the commit does not wait out).
pub const WAIT: Duration = Duration::from_secs(3);

/// The lock file git takes before it writes the index.
const INDEX_LOCK: &str = "index.lock";

/// Held for the commit; removed on drop.
#[derive(Debug)]
pub(crate) struct GitLock {
    git: OwnedFd,
}

impl Drop for GitLock {
    fn drop(&mut self) {
        let _ = nix::unistd::unlinkat(
            &self.git,
            INDEX_LOCK,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// A host git held a lock past [`WAIT`]: a conflict.
    Busy(Problem),
    /// The run itself left a lock file: refused.
    LeftByRun(Problem),
    /// The repository could not be reached.
    Io(PathBuf, Errno),
}

/// What the lock file says: whose it is.
fn marker(run_id: &str) -> String {
    format!("cmdgate commit {run_id}\n")
}

/// Takes the lock of the workspace's repository when `paths` (workspace-relative, what the commit
/// changes) reach into `.git/`; `None` when they do not, or when `.git` is not a directory here.
pub(crate) fn lock(
    ws: &OwnedFd,
    paths: &[PathBuf],
    run_id: &str,
) -> Result<Option<GitLock>, LockError> {
    let inside: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(".git").ok())
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    if inside.is_empty() {
        return Ok(None);
    }
    if let Some(left) = inside
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "lock"))
    {
        return Err(LockError::LeftByRun(Problem {
            path: Path::new(".git").join(left),
            why: "a git lock file the run left behind (a git that did not finish); committing it \
                  would lock the repository"
                .into(),
        }));
    }
    let git = match open_dir_at(ws, OsStr::new(".git")) {
        Ok(fd) => fd,
        // A `.git` file or link, or none: not a repository the commit writes into as git does.
        Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(LockError::Io(PathBuf::from(".git"), e)),
    };
    // Locks git would hold for the files this commit changes (`refs/heads/main.lock`, …).
    let others: Vec<PathBuf> = inside
        .iter()
        .map(|p| {
            let mut name = p.as_os_str().to_owned();
            name.push(".lock");
            PathBuf::from(name)
        })
        .filter(|p| p.as_os_str() != INDEX_LOCK)
        .collect();
    let deadline = Instant::now() + WAIT;
    let mut pause = Duration::from_millis(5);
    loop {
        let held = match take(&git, run_id) {
            Ok(()) => match others
                .iter()
                .find(|p| exists_beneath(&git, p).unwrap_or(true))
            {
                None => return Ok(Some(GitLock { git })),
                Some(other) => {
                    // Someone works on a file we change: let go and wait with them.
                    let _ = nix::unistd::unlinkat(
                        &git,
                        INDEX_LOCK,
                        nix::unistd::UnlinkatFlags::NoRemoveDir,
                    );
                    other.clone()
                }
            },
            Err(Errno::EEXIST) => PathBuf::from(INDEX_LOCK),
            Err(e) => return Err(LockError::Io(PathBuf::from(".git/index.lock"), e)),
        };
        if Instant::now() >= deadline {
            return Err(LockError::Busy(Problem {
                path: Path::new(".git").join(&held),
                why: format!(
                    "another git holds the repository's lock (still there after {} s); nothing \
                     of the run was committed",
                    WAIT.as_secs()
                ),
            }));
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Creates `index.lock` exclusively, saying whose it is.
fn take(git: &OwnedFd, run_id: &str) -> Result<(), Errno> {
    let fd = nix::fcntl::openat(
        git,
        INDEX_LOCK,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, marker(run_id).as_bytes())
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Whether `rel` exists below `dir` (its directories reached without following links).
fn exists_beneath(dir: &OwnedFd, rel: &Path) -> Result<bool, Errno> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(false);
    };
    let mut fd = dir
        .try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    for c in parent.components() {
        match c {
            Component::Normal(n) => match open_dir_at(&fd, n) {
                Ok(next) => fd = next,
                Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(false),
                Err(e) => return Err(e),
            },
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok(lstat_at(&fd, name)?.is_some())
}

/// Removes the workspace's `index.lock` when it is the one a commit of `run_id` took (after a
/// crash mid-commit); anything else there is left alone.
pub(crate) fn release_stale(ws: &OwnedFd, run_id: &str) {
    let Ok(git) = open_dir_at(ws, OsStr::new(".git")) else {
        return;
    };
    let Ok(fd) = nix::fcntl::openat(
        &git,
        INDEX_LOCK,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let mut text = String::new();
    let ours = std::fs::File::from(fd)
        .take(256)
        .read_to_string(&mut text)
        .is_ok()
        && text == marker(run_id);
    if ours {
        let _ = nix::unistd::unlinkat(&git, INDEX_LOCK, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::fsx::open_root;

    fn repo() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join(".git/refs/heads")).expect("mkdir");
        let ws = open_root(dir.path()).expect("open");
        (dir, ws)
    }

    #[test]
    fn the_lock_is_taken_held_and_released_only_for_git_changes() {
        let (dir, ws) = repo();
        let lock_file = dir.path().join(".git/index.lock");
        let none = lock(&ws, &[PathBuf::from("src/a.rs")], "r1").expect("lock");
        assert!(none.is_none());
        let held = lock(&ws, &[PathBuf::from(".git/index")], "r1").expect("lock");
        assert!(held.is_some());
        assert_eq!(
            std::fs::read_to_string(&lock_file).expect("held"),
            "cmdgate commit r1\n"
        );
        drop(held);
        assert!(!lock_file.exists());
        // A lock the run left is refused at once.
        let left = lock(&ws, &[PathBuf::from(".git/refs/heads/main.lock")], "r1");
        assert!(matches!(left, Err(LockError::LeftByRun(_))), "{left:?}");
    }

    #[test]
    fn a_stale_lock_is_released_only_when_it_names_the_run() {
        let (dir, ws) = repo();
        let lock_file = dir.path().join(".git/index.lock");
        std::fs::write(&lock_file, "cmdgate commit other\n").expect("write");
        release_stale(&ws, "r1");
        assert!(lock_file.exists(), "another's lock stays");
        std::fs::write(&lock_file, "cmdgate commit r1\n").expect("write");
        release_stale(&ws, "r1");
        assert!(!lock_file.exists());
    }
}

//! Commit a finished mirrored run's workspace upper dir to the real workspace — or nothing of it.
//!
//! ```text
//! plan   walk the upper dir (the run's pid namespace is gone): whiteouts (char 0/0, or the
//!        whiteout xattr), opaque dirs (trusted.overlay.opaque: the mount's namespace, never
//!        user.*), type changes, modes; a device/fifo/socket, a set-id file or a redirect /
//!        metacopy xattr ⇒ refuse; a host entry changed since the run started (ctime after the
//!        start, see `clock`; whole subtree for a replaced/deleted directory), a host directory
//!        that is no longer one, or a hard-linked file whose other names would keep the old
//!        content ⇒ conflict. Any problem ⇒ Err, nothing touched.
//! apply  journal manifest (without `committed` it means "applying"), fsynced with its dirs →
//!        per tree (the workspace, then each kept `write=` path) and entry:
//!        re-check, rename the host entry into journal/pre/N (atomic, keeps the inode), rename
//!        the upper entry in with RENAME_NOREPLACE (a name taken meanwhile ⇒ conflict ⇒ rollback)
//!        → syncfs (new content and renames durable) → `committed` marker. Every host path is reached from the workspace fd one
//!        component at a time with O_NOFOLLOW (`fsx`): a symlink is never followed on the host.
//! crash  `recover` rolls back a journal without `committed` (new entries back to the upper dir,
//!        pre-images back in place): never half-applied. `undo` restores a committed run after
//!        checking every post-image is still what the commit put there.
//! ```
//!
//! Hard links: the mirror mounts with `index=off`, so copying up one name of a multiply-linked
//! file breaks the link in the mirror. A commit never writes into an existing inode (it renames
//! new entries over names), so replacing a name whose host inode has other names that this run
//! does not also replace or delete would leave those names with the old content — unlike the
//! real run. That is refused, naming the file. Links the run made among its own new entries (cargo
//! links `target/debug/x` to `deps/x-…`) are kept: both names are renamed in, same inode.

pub mod apply;
pub mod diff;
pub mod fsx;
pub mod gitlock;
mod journal;

pub use apply::{apply, kept_runs, prune_kept, ApplyError, KeptRun};
pub use diff::{
    run_diff, DiffError, DiffLimits, DiffSource, DiffStat, FileChange, FileDiff, RunDiff,
};
pub use journal::{
    prune, recover, runs, undo, JournalEntry, JournalLimits, JournalState, RecoverReport,
    UndoError, UndoReport,
};

use crate::mirror::KeptUpper;
use fsx::{ctime, kind, lstat_at, open_dir_at, open_root};
use journal::{Manifest, Op};
use nix::errno::Errno;
use nix::sys::stat::FileStat;
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How to commit.
#[derive(Clone, Debug, Default)]
pub struct CommitConfig {
    /// Fault injection for crash tests (real code, not a mock): stop after this many journal
    /// steps (each rename or chmod is one) exactly as if the process died there — no rollback,
    /// the journal stays for [`recover`]. `None` in production.
    pub stop_after: Option<usize>,
}

/// One path a commit changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Workspace-relative path.
    #[serde(with = "crate::model::lossless_path")]
    pub path: PathBuf,
    /// What happened to it.
    pub what: ChangeKind,
}

/// What a commit did to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new entry (a new directory counts once, with everything below it).
    Created,
    /// An existing entry was replaced (its pre-image is in the journal).
    Replaced,
    /// An existing entry was deleted (its pre-image is in the journal).
    Deleted,
    /// A directory's permission bits changed.
    Mode,
}

/// A committed run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommitReport {
    /// The run (and journal) id, for `undo` (no journal entry when `changes` is empty).
    pub run_id: String,
    /// What changed, in commit order.
    pub changes: Vec<Change>,
    /// Bytes of pre-images kept in the journal.
    pub journal_bytes: u64,
    /// Wall time of the commit.
    pub duration: Duration,
}

/// A path that stops the commit, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Workspace-relative path.
    #[serde(with = "crate::model::lossless_path")]
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

fn list(problems: &[Problem]) -> String {
    let mut s: Vec<String> = problems.iter().take(10).map(|p| p.to_string()).collect();
    if problems.len() > 10 {
        s.push(format!("and {} more", problems.len() - 10));
    }
    s.join("; ")
}

/// Why nothing was committed. Each variant but `Stopped` and `Journal` hands the kept upper dir
/// back (discard it, or keep it for an operator).
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The caller killed the run.
    #[error("the run was killed before it finished; nothing of it is committed")]
    Killed(Box<KeptUpper>),
    /// The host changed under the run.
    #[error("conflicts with changes made on the host since the run started: {}", list(.problems))]
    Conflict {
        /// The conflicting paths.
        problems: Vec<Problem>,
        /// The upper dir, untouched.
        kept: Box<KeptUpper>,
    },
    /// The upper dir holds something a commit must never place.
    #[error("refused: {}", list(.problems))]
    Refused {
        /// The refused paths.
        problems: Vec<Problem>,
        /// The upper dir, untouched.
        kept: Box<KeptUpper>,
    },
    /// A filesystem error; whatever was applied was rolled back.
    #[error("failed to commit {path}: {source}; rolled back")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
        /// The upper dir, as before the commit.
        kept: Box<KeptUpper>,
    },
    /// `stop_after` fired: the journal is left as a crash would leave it.
    #[error("stopped after {0} steps (fault injection); recover() repairs it")]
    Stopped(usize),
    /// The rollback itself failed: the journal stays, `recover` retries at the next start.
    #[error("failed to roll back the commit ({0}); the journal is kept for recovery")]
    Journal(String),
}

/// The overlay xattr namespace of the mirror's mounts: `trusted.` (the helper mounts as real
/// root, without `userxattr`). `user.overlay.*` on an upper entry is the command's own data, never
/// an overlay marker (binpash/try #163 read the wrong one and let an old file survive).
const OVERLAY_XATTR: &str = "trusted.overlay.";

/// What an upper entry is, for the commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Upper {
    Whiteout,
    OpaqueDir,
    Dir,
    Other,
}

struct Planner<'a> {
    started: [i64; 2],
    upper_root: &'a Path,
    ops: Vec<Op>,
    conflicts: Vec<Problem>,
    refused: Vec<Problem>,
    /// Host inodes with more than one name that the plan moves away: ino → (nlink, names moved,
    /// one replaced path).
    links: std::collections::HashMap<u64, (u64, u64, Option<PathBuf>)>,
    journal_bytes: u64,
    /// Created names whose upper entry was copied up from a lower inode (`origin`): legitimate
    /// only if that inode is one this plan also moves (the run renamed or linked it); otherwise
    /// the host deleted it while the run ran, and the commit would resurrect it (a directory
    /// with only the entries the run touched).
    origins: Vec<(PathBuf, u64)>,
    /// The buffer extended attribute names are listed into (reused: one per entry otherwise).
    xattrs: Vec<u8>,
}

/// The lower inode number in an overlay `origin` xattr (`struct ovl_fb`: version, magic 0xfb,
/// len, flags, fid type, 16-byte uuid, then the fid), for the fid types holding a 32-bit inode
/// first (ext4, xfs: FILEID_INO32_GEN and _PARENT). `None` for other filesystems.
fn origin_ino(value: &[u8]) -> Option<u64> {
    const FID: usize = 5 + 16;
    if value.get(1) != Some(&0xfb) || !matches!(value.get(4), Some(1 | 2)) {
        return None;
    }
    let ino: [u8; 4] = value.get(FID..FID + 4)?.try_into().ok()?;
    Some(u64::from(u32::from_ne_bytes(ino)))
}

/// From this many entries in a merged directory, the host's names are listed once.
const LIST_HOST_FROM: usize = 64;

/// Changed after the run started: its start is a [`crate::clock`] boundary, with every earlier
/// change at or before it and every later one after it.
fn newer(st: &FileStat, started: [i64; 2]) -> bool {
    ctime(st) > started
}

/// Names in the directory open at `fd` (read through /proc/self/fd: the fd, not a path), in
/// the directory's own order.
fn names_unsorted(fd: &OwnedFd) -> std::io::Result<impl Iterator<Item = OsString>> {
    Ok(
        std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))?
            .filter_map(|e| e.ok().map(|e| e.file_name())),
    )
}

/// Names in the directory open at `fd`, sorted (the commit's order).
fn names(fd: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    let mut v: Vec<OsString> = names_unsorted(fd)?.collect();
    v.sort_unstable();
    Ok(v)
}

/// `rel/name` (`Path::join` parses both for separators and prefixes: a cost per entry).
fn child(rel: &Path, name: &OsStr) -> PathBuf {
    let mut p = OsString::with_capacity(rel.as_os_str().len() + 1 + name.len());
    p.push(rel.as_os_str());
    if !rel.as_os_str().is_empty() {
        p.push("/");
    }
    p.push(name);
    PathBuf::from(p)
}

impl Planner<'_> {
    /// Classify and validate one upper entry, `name` in the directory open at `dir` (refusals
    /// recorded); also whether it carries an overlay `origin` (copied up from a lower inode).
    /// `rel` builds the entry's workspace-relative path, only when needed (a problem, an
    /// extended attribute read by path).
    fn classify(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        rel: &dyn Fn() -> PathBuf,
        st: &FileStat,
    ) -> Option<(Upper, bool)> {
        let root = self.upper_root;
        let mut xattrs = std::mem::take(&mut self.xattrs);
        let listed = fsx::xattr_list_at(dir, name, || root.join(rel()), &mut xattrs);
        let found = self.markers(rel, st, listed.map(|()| xattrs.as_slice()));
        self.xattrs = xattrs;
        found
    }

    /// [`Self::classify`] on the entry's stat and its listed extended attribute names.
    fn markers(
        &mut self,
        rel: &dyn Fn() -> PathBuf,
        st: &FileStat,
        xattrs: Result<&[u8], Errno>,
    ) -> Option<(Upper, bool)> {
        let root = self.upper_root;
        let path = || root.join(rel());
        let mut problem = |why: &str| {
            self.refused.push(Problem {
                path: rel(),
                why: why.to_string(),
            });
            None
        };
        let k = kind(st);
        if k == libc::S_IFCHR && st.st_rdev == 0 {
            return Some((Upper::Whiteout, false));
        }
        match k {
            libc::S_IFCHR | libc::S_IFBLK => return problem("device node"),
            libc::S_IFIFO | libc::S_IFSOCK => return problem("fifo or socket (not committed)"),
            libc::S_IFREG if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 => {
                return problem("set-user-id or set-group-id file")
            }
            _ => {}
        }
        // Markers it cannot read are not markers it may ignore.
        let Ok(xattrs) = xattrs else {
            return problem("cannot list the run's entry's extended attributes");
        };
        let (mut opaque, mut origin) = (false, false);
        for name in xattrs.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let Some(rest) = name.strip_prefix(OVERLAY_XATTR.as_bytes()) else {
                continue;
            };
            match rest {
                b"whiteout" if k == libc::S_IFREG => return Some((Upper::Whiteout, false)),
                b"origin" => origin = true,
                b"opaque" => match fsx::xattr(&path(), "trusted.overlay.opaque").as_deref() {
                    Some(b"y") => opaque = true,
                    _ => return problem("overlay opaque marker other than \"y\""),
                },
                b"redirect" | b"metacopy" => {
                    return problem("overlay redirect or metacopy xattr (the mirror disables them)")
                }
                // origin, impure, nlink, uuid...: bookkeeping of the copy-up, not content.
                _ => {}
            }
        }
        let what = match (k == libc::S_IFDIR, opaque) {
            (true, true) => Upper::OpaqueDir,
            (true, false) => Upper::Dir,
            (false, _) => Upper::Other,
        };
        Some((what, origin))
    }

    /// Validate a whole new subtree of the upper dir (it moves with one rename).
    fn check_new_tree(&mut self, fd: &OwnedFd, rel: &Path) {
        let Ok(entries) = names(fd) else {
            self.refused.push(Problem {
                path: rel.to_path_buf(),
                why: "cannot list the run's directory".into(),
            });
            return;
        };
        for name in entries {
            // Built for the few that need it (a problem, a subdirectory), not for every file.
            let rel = || child(rel, &name);
            let st = match lstat_at(fd, &name) {
                Ok(Some(st)) => st,
                // The run is over: nothing else changes its upper dir. Every entry classified.
                Ok(None) | Err(_) => {
                    self.refused.push(Problem {
                        path: rel(),
                        why: "cannot inspect the run's entry".into(),
                    });
                    continue;
                }
            };
            match self.classify(fd, &name, &rel, &st).map(|(u, _)| u) {
                Some(Upper::Whiteout) => self.refused.push(Problem {
                    path: rel(),
                    why: "whiteout inside a new directory".into(),
                }),
                Some(Upper::Dir | Upper::OpaqueDir) => match open_dir_at(fd, &name) {
                    Ok(sub) => self.check_new_tree(&sub, &rel()),
                    Err(e) => self.refused.push(Problem {
                        path: rel(),
                        why: format!("cannot open the run's directory: {e}"),
                    }),
                },
                _ => {}
            }
        }
    }

    /// A host entry about to move into the journal: changed since the run started? (whole
    /// subtree for a directory) Also counts journal bytes and multiply-linked names.
    fn check_old(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        st: &FileStat,
        rel: &Path,
        replaced: bool,
    ) {
        if newer(st, self.started) {
            self.conflicts.push(Problem {
                path: rel.to_path_buf(),
                why: "changed on the host after the run started".into(),
            });
            return;
        }
        match kind(st) {
            libc::S_IFREG => {
                self.journal_bytes += st.st_size as u64;
                if st.st_nlink > 1 {
                    let e = self
                        .links
                        .entry(st.st_ino)
                        .or_insert((st.st_nlink, 0, None));
                    e.1 += 1;
                    if replaced {
                        e.2 = Some(rel.to_path_buf());
                    }
                }
            }
            libc::S_IFDIR => match open_dir_at(dir, name) {
                Ok(sub) => match names(&sub) {
                    Ok(entries) => {
                        for entry in entries {
                            if let Ok(Some(cst)) = lstat_at(&sub, &entry) {
                                self.check_old(&sub, &entry, &cst, &child(rel, &entry), false);
                            }
                        }
                    }
                    Err(e) => self.conflicts.push(Problem {
                        path: rel.to_path_buf(),
                        why: format!("cannot list the host directory: {e}"),
                    }),
                },
                Err(e) => self.conflicts.push(Problem {
                    path: rel.to_path_buf(),
                    why: format!("cannot open the host directory: {e}"),
                }),
            },
            _ => {}
        }
    }

    /// Walk one merged directory: `upper`/`host` are open at `rel` on both sides.
    fn walk(&mut self, upper: &OwnedFd, host: &OwnedFd, rel: &Path) {
        let entries = match names(upper) {
            Ok(e) => e,
            Err(e) => {
                self.refused.push(Problem {
                    path: rel.to_path_buf(),
                    why: format!("cannot list the run's directory: {e}"),
                });
                return;
            }
        };
        // Many upper entries against a host directory not much larger: one listing of the host
        // names instead of a failing lstat per new name (a build's 10,000 new outputs). Racy
        // only as the lstat was: the apply step's RENAME_NOREPLACE catches a name taken since.
        let host_names = (entries.len() >= LIST_HOST_FROM)
            .then(|| nix::sys::stat::fstat(host).ok())
            .flatten()
            .filter(|st| (st.st_size as u64) <= entries.len() as u64 * 256)
            .and_then(|_| names_unsorted(host).ok())
            .map(|v| v.collect::<std::collections::HashSet<OsString>>());
        for name in entries {
            let rel = child(rel, &name);
            let ust = match lstat_at(upper, &name) {
                Ok(Some(st)) => st,
                // The run is over: nothing else changes its upper dir. Every entry classified.
                Ok(None) | Err(_) => {
                    self.refused.push(Problem {
                        path: rel,
                        why: "cannot inspect the run's entry".into(),
                    });
                    continue;
                }
            };
            let Some((what, has_origin)) = self.classify(upper, &name, &|| rel.clone(), &ust)
            else {
                continue;
            };
            let looked = match &host_names {
                Some(known) if !known.contains(&name) => Ok(None),
                _ => lstat_at(host, &name),
            };
            let hst = match looked {
                Ok(h) => h,
                Err(e) => {
                    self.conflicts.push(Problem {
                        path: rel,
                        why: format!("cannot inspect the host entry: {e}"),
                    });
                    continue;
                }
            };
            match (what, hst) {
                (Upper::Whiteout, None) => {} // gone on both sides
                (Upper::Whiteout, Some(h)) => {
                    self.check_old(host, &name, &h, &rel, false);
                    self.ops.push(Op::new(rel, None, Some(h.st_ino), None));
                }
                (Upper::Dir, Some(h)) if kind(&h) == libc::S_IFDIR => {
                    let (old, new) = (h.st_mode & 0o7777, ust.st_mode & 0o7777);
                    if old != new {
                        self.ops
                            .push(Op::new(rel.clone(), None, None, Some((old, new))));
                    }
                    match (open_dir_at(upper, &name), open_dir_at(host, &name)) {
                        (Ok(u), Ok(h)) => self.walk(&u, &h, &rel),
                        (_, Err(e)) => self.conflicts.push(Problem {
                            path: rel,
                            why: format!("the host directory changed under the run: {e}"),
                        }),
                        (Err(e), _) => self.refused.push(Problem {
                            path: rel,
                            why: format!("cannot open the run's directory: {e}"),
                        }),
                    }
                }
                (_, h) => {
                    if matches!(what, Upper::Dir | Upper::OpaqueDir) {
                        match open_dir_at(upper, &name) {
                            Ok(sub) => self.check_new_tree(&sub, &rel),
                            Err(e) => self.refused.push(Problem {
                                path: rel.clone(),
                                why: format!("cannot open the run's directory: {e}"),
                            }),
                        }
                    }
                    match &h {
                        Some(h) => self.check_old(host, &name, h, &rel, true),
                        None if has_origin => {
                            let origin =
                                fsx::xattr(&self.upper_root.join(&rel), "trusted.overlay.origin");
                            if let Some(ino) = origin.as_deref().and_then(origin_ino) {
                                self.origins.push((rel.clone(), ino));
                            }
                        }
                        None => {}
                    }
                    self.ops
                        .push(Op::new(rel, Some(ust.st_ino), h.map(|h| h.st_ino), None));
                }
            }
        }
    }

    /// Copied-up entries whose lower inode the plan does not move: deleted on the host.
    fn deleted_on_host(&mut self) {
        let moved: std::collections::HashSet<u64> =
            self.ops.iter().filter_map(Op::old_ino).collect();
        for (rel, ino) in std::mem::take(&mut self.origins) {
            if !moved.contains(&ino) {
                self.conflicts.push(Problem {
                    path: rel,
                    why: "deleted on the host while the run changed it".into(),
                });
            }
        }
    }

    /// Hard-linked host files whose other names the plan leaves in place.
    fn split_links(&mut self) {
        for (nlink, moved, replaced) in self.links.values() {
            if let (true, Some(path)) = (moved < nlink, replaced) {
                self.refused.push(Problem {
                    path: path.clone(),
                    why: format!(
                        "hard-linked file ({nlink} names): replacing this name would leave the \
                         other names with the old content"
                    ),
                });
            }
        }
    }
}

/// One tree's plan.
struct Planned {
    ops: Vec<Op>,
    conflicts: Vec<Problem>,
    refused: Vec<Problem>,
    journal_bytes: u64,
}

/// Plan one tree: `host` its root, `upper` its upper dir (`upper_path` for xattrs); problems
/// shown under `shown` (none for the workspace).
fn plan(
    started: [i64; 2],
    upper_path: &Path,
    upper: &OwnedFd,
    host: &OwnedFd,
    shown: Option<&Path>,
) -> Planned {
    let mut planner = Planner {
        started,
        upper_root: upper_path,
        ops: Vec::new(),
        conflicts: Vec::new(),
        refused: Vec::new(),
        links: Default::default(),
        journal_bytes: 0,
        origins: Vec::new(),
        xattrs: Vec::new(),
    };
    planner.walk(upper, host, Path::new(""));
    planner.split_links();
    planner.deleted_on_host();
    let Planner {
        ops,
        mut conflicts,
        mut refused,
        journal_bytes,
        ..
    } = planner;
    if let Some(prefix) = shown {
        for p in conflicts.iter_mut().chain(refused.iter_mut()) {
            p.path = prefix.join(&p.path);
        }
    }
    Planned {
        ops,
        conflicts,
        refused,
        journal_bytes,
    }
}

/// Commit `kept` to its workspace and its kept `write=` trees: everything, or nothing (see the
/// module docs).
pub fn commit(kept: KeptUpper, config: &CommitConfig) -> Result<CommitReport, CommitError> {
    commit_spent(kept, config).map(|(report, _spent)| report)
}

/// What is left of a committed run's kept dirs (the upper dirs' whiteouts and directory
/// skeletons, the overlays' work dirs): nothing refers to it once the commit is done. Dropping
/// it moves the dirs to their store's trash (`trash::dispose`); a crash before that leaves
/// them for `recover`, which discards every run dir not kept for an apply. Held by a caller
/// that has more urgent work after the commit (the daemon: the run's row and end frame).
#[must_use = "dropping it disposes of the run's dirs"]
pub struct Spent(Option<KeptUpper>);

impl Spent {
    /// Nothing left here (the helper of a non-root caller removed it itself).
    pub fn none() -> Spent {
        Spent(None)
    }
}

impl Drop for Spent {
    fn drop(&mut self) {
        if let Some(kept) = self.0.as_mut() {
            kept.done = true;
            let _ = kept.remove();
        }
    }
}

/// [`commit`], handing back what is left of the kept dirs instead of disposing of it.
pub fn commit_spent(
    kept: KeptUpper,
    config: &CommitConfig,
) -> Result<(CommitReport, Spent), CommitError> {
    let t0 = Instant::now();
    if kept.meta.killed {
        return Err(CommitError::Killed(Box::new(kept)));
    }
    let workspace = kept.workspace().to_path_buf();
    let early = early_writeback(&kept.upper());
    let io = |path: &Path, e: Errno, kept: KeptUpper| CommitError::Io {
        path: path.to_path_buf(),
        source: e.into(),
        kept: Box::new(kept),
    };
    // (host root, upper dir, journal dir of a write= tree): the workspace first.
    let mut trees: Vec<(PathBuf, PathBuf, Option<PathBuf>)> =
        vec![(workspace.clone(), kept.upper(), None)];
    for k in kept.meta.extra.clone() {
        let name = k
            .keep
            .file_name()
            .map(OsStr::to_os_string)
            .unwrap_or_default();
        let pre = k
            .keep
            .parent()
            .and_then(Path::parent)
            .map(|root| root.join("pre").join(name));
        let Some(pre) = pre else {
            return Err(io(&k.keep, Errno::EINVAL, kept));
        };
        trees.push((k.target.clone(), k.keep.join("upper"), Some(pre)));
    }
    let mut fds = Vec::new();
    let mut planned = Vec::new();
    for (root, upper_path, pre) in &trees {
        let host = match fsx::open_host_root(root) {
            Ok(fd) => fd,
            Err(e) => return Err(io(root, e, kept)),
        };
        let upper = match open_root(upper_path) {
            Ok(fd) => fd,
            Err(e) => return Err(io(upper_path, e, kept)),
        };
        let shown = pre.as_ref().map(|_| root.as_path());
        planned.push(plan(kept.meta.started, upper_path, &upper, &host, shown));
        fds.push(journal::TreeFds { root: host, upper });
    }
    let refused: Vec<Problem> = planned
        .iter_mut()
        .flat_map(|p| p.refused.drain(..))
        .collect();
    if !refused.is_empty() {
        return Err(CommitError::Refused {
            problems: refused,
            kept: Box::new(kept),
        });
    }
    let conflicts: Vec<Problem> = planned
        .iter_mut()
        .flat_map(|p| p.conflicts.drain(..))
        .collect();
    if !conflicts.is_empty() {
        return Err(CommitError::Conflict {
            problems: conflicts,
            kept: Box::new(kept),
        });
    }
    let journal_bytes = planned.iter().map(|p| p.journal_bytes).sum();
    if planned.iter().all(|p| p.ops.is_empty()) {
        // Nothing reached the host: no journal, no flush, nothing to undo.
        return Ok((
            CommitReport {
                run_id: kept.meta.run_id.clone(),
                changes: Vec::new(),
                journal_bytes: 0,
                duration: t0.elapsed(),
            },
            Spent(Some(kept)),
        ));
    }
    // Only the trees with something to do are journaled (the workspace's always is: its
    // journal dir carries the manifest and the markers).
    let mut planned = planned.into_iter();
    let ws_ops = planned.next().map(|p| p.ops).unwrap_or_default();
    let mut fds = fds.into_iter();
    let mut used_fds: Vec<journal::TreeFds> = fds.next().into_iter().collect();
    let mut extra = Vec::new();
    for (((root, upper, pre), p), fd) in trees.into_iter().skip(1).zip(planned).zip(fds) {
        if p.ops.is_empty() {
            continue;
        }
        extra.push(journal::ExtraTree {
            root,
            upper,
            dir: pre.unwrap_or_default(),
            ops: p.ops,
        });
        used_fds.push(fd);
    }
    // Git's lock discipline: changes under `.git/` only while cmdgate holds the repository's
    // `index.lock` (a host git holding it is waited for briefly, then it is a conflict).
    let paths: Vec<PathBuf> = ws_ops.iter().map(|op| op.change().path).collect();
    let _git_lock = match gitlock::lock(&used_fds[0].root, &paths, kept.run_id()) {
        Ok(lock) => lock,
        Err(gitlock::LockError::Busy(problem)) => {
            return Err(CommitError::Conflict {
                problems: vec![problem],
                kept: Box::new(kept),
            })
        }
        Err(gitlock::LockError::LeftByRun(problem)) => {
            return Err(CommitError::Refused {
                problems: vec![problem],
                kept: Box::new(kept),
            })
        }
        Err(gitlock::LockError::Io(path, e)) => {
            return Err(CommitError::Io {
                path,
                source: e.into(),
                kept: Box::new(kept),
            })
        }
    };
    let manifest = Manifest {
        run_id: kept.run_id().to_string(),
        workspace,
        upper: kept.upper(),
        started: kept.meta.started,
        journal_bytes,
        ops: ws_ops,
        extra,
    };
    let jdir = kept.store.journal().join(kept.run_id());
    match journal::apply(&manifest, &jdir, &used_fds, config.stop_after) {
        Ok(()) => {}
        Err(journal::ApplyError::Stopped(n)) => {
            leave(kept); // a crash would leave the upper dir too
            return Err(CommitError::Stopped(n));
        }
        Err(journal::ApplyError::Conflict(problem)) => {
            return Err(CommitError::Conflict {
                problems: vec![problem],
                kept: Box::new(kept),
            })
        }
        Err(journal::ApplyError::Io(path, e)) => {
            return Err(CommitError::Io {
                path,
                source: e,
                kept: Box::new(kept),
            })
        }
        Err(journal::ApplyError::Journal(e)) => {
            leave(kept); // recover() needs it
            return Err(CommitError::Journal(e));
        }
    }
    early.join();
    let changes = manifest.changes();
    // What remains of the upper dirs (whiteouts, merged directories' skeletons) is spent.
    Ok((
        CommitReport {
            run_id: manifest.run_id,
            changes,
            journal_bytes,
            duration: t0.elapsed(),
        },
        Spent(Some(kept)),
    ))
}

/// Start writing the run's new content back while the commit plans and renames: the mirror's
/// overlays are `volatile`, so the run's new inodes and data are all still dirty, and the
/// commit's flush after the renames (which makes them durable before `committed`) would write
/// them all on its critical path. This `syncfs` of the upper dir's filesystem (the workspace's)
/// only starts that earlier, in a thread; it guarantees nothing and nothing waits for it but
/// the end of a successful commit (dropping the guard of a failed one leaves the thread to
/// finish on its own). None for an empty upper dir (a run that wrote nothing has nothing to
/// write back, and the commit does not flush).
fn early_writeback(upper: &Path) -> EarlyWriteback {
    let fd = open_root(upper)
        .ok()
        .filter(|fd| names_unsorted(fd).is_ok_and(|mut n| n.next().is_some()));
    EarlyWriteback(fd.and_then(|fd| {
        std::thread::Builder::new()
            .name("commit-writeback".into())
            .spawn(move || {
                let _ = fsx::syncfs(&fd);
            })
            .ok()
    }))
}

/// The thread of [`early_writeback`].
struct EarlyWriteback(Option<std::thread::JoinHandle<()>>);

impl EarlyWriteback {
    /// Wait for it (a successful commit: its flush already waited for the same writeback).
    fn join(mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

/// Leave the upper dir on disk (the journal refers to it).
fn leave(mut kept: KeptUpper) {
    kept.done = true;
}

/// Escape a path's bytes for the journal (JSON strings must be UTF-8): printable ASCII but `%`
/// stays, everything else is `%XX`.
pub(crate) fn escape(p: &Path) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let bytes = p.as_os_str().as_bytes();
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' || b == b' ' {
            s.push(b as char);
        } else {
            s.push('%');
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 15)] as char);
        }
    }
    s
}

/// Inverse of [`escape`].
pub(crate) fn unescape(s: &str) -> Option<PathBuf> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(OsStr::from_bytes(&out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_round_trips_any_bytes() {
        for raw in [
            &b"plain/path.rs"[..],
            b"with space",
            b"new\nline",
            b"100%",
            b"\xff\xfe not utf-8",
            b"",
        ] {
            let p = PathBuf::from(OsStr::from_bytes(raw));
            let e = escape(&p);
            assert!(!e.contains('\n'));
            assert_eq!(unescape(&e), Some(p), "{e}");
        }
        assert_eq!(unescape("%G1"), None);
        assert_eq!(unescape("%4"), None);
    }
}

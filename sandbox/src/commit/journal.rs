//! The commit journal: `<store>/journal/<run id>/` holds `manifest.json` (every step, written
//! before the first), `pre/<n>` (the host entries the commit moved away: renamed, so atomic and
//! the same inode), and markers: `committed` (all ran and are on disk), `undoing` / `undone`.
//! Recovery follows them: a manifest without `committed` (steps may have run; written synced
//! before the first) is rolled back, `undoing` without `undone` is finished. A kept `write=` tree
//! has its `pre/` on its own mount (`<store>/pre/<run id>-w<n>`), named by this manifest.
//! Bounded by age and bytes (`prune`).

use super::fsx::{self, lstat_at, move_noreplace, open_beneath, open_dir_at, open_root};
use super::{escape, unescape, Change, ChangeKind, Problem};
use crate::clock::{precise_now, settle, wait_past};
use crate::mirror::{remove_tree, valid_id, Meta};
use crate::store::{self, Store};
use nix::errno::Errno;
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One step of a commit, in order. Paths are escaped (`super::escape`) in JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Op {
    /// Workspace-relative path (escaped).
    path: String,
    /// Inode of the upper entry renamed to `path` (none: a deletion or mode change).
    new: Option<u64>,
    /// Inode of the host entry renamed to `pre/<n>` (none: nothing was there).
    old: Option<u64>,
    /// Permission bits of a merged directory: (before, after).
    mode: Option<(u32, u32)>,
}

impl Op {
    pub(crate) fn new(
        rel: PathBuf,
        new: Option<u64>,
        old: Option<u64>,
        mode: Option<(u32, u32)>,
    ) -> Op {
        Op {
            path: escape(&rel),
            new,
            old,
            mode,
        }
    }

    pub(crate) fn old_ino(&self) -> Option<u64> {
        self.old
    }

    fn rel(&self) -> PathBuf {
        unescape(&self.path).unwrap_or_default()
    }

    pub(crate) fn change(&self) -> Change {
        Change {
            path: self.rel(),
            what: match (self.new, self.old, self.mode) {
                (Some(_), None, _) => ChangeKind::Created,
                (Some(_), Some(_), _) => ChangeKind::Replaced,
                (None, Some(_), _) => ChangeKind::Deleted,
                (None, None, _) => ChangeKind::Mode,
            },
        }
    }

    /// (parent, name), or None for the workspace root itself (never an op).
    fn split(&self) -> Option<(PathBuf, OsString)> {
        let rel = self.rel();
        let name = rel.file_name()?.to_os_string();
        Some((rel.parent().unwrap_or(Path::new("")).to_path_buf(), name))
    }
}

/// Everything a recovery or an undo needs, written before the first step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub run_id: String,
    pub workspace: PathBuf,
    pub upper: PathBuf,
    pub started: [i64; 2],
    pub journal_bytes: u64,
    pub ops: Vec<Op>,
    /// The kept `write=` trees committed with the workspace, all or nothing.
    #[serde(default)]
    pub extra: Vec<ExtraTree>,
}

/// A kept `write=` path committed with the workspace (issue 19): the same steps, its own
/// pre-images on its own mount.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ExtraTree {
    /// The host directory (canonical).
    pub root: PathBuf,
    /// Its kept upper dir.
    pub upper: PathBuf,
    /// Its journal dir on the same mount (`<store>/pre/<run id>-w<n>`): `pre/`, `undone-entries/`.
    pub dir: PathBuf,
    pub ops: Vec<Op>,
}

/// One tree of a commit as the steps see it: the workspace (paths relative to it) or a `write=`
/// path (paths shown absolute).
struct TreeRef<'a> {
    root: &'a Path,
    upper: &'a Path,
    /// Holds `pre/` and `undone-entries/` (the workspace's: the journal dir itself).
    dir: PathBuf,
    ops: &'a [Op],
    /// Prefix of the paths shown (none for the workspace).
    shown: Option<&'a Path>,
}

impl TreeRef<'_> {
    fn show(&self, rel: &Path) -> PathBuf {
        match self.shown {
            Some(p) => p.join(rel),
            None => rel.to_path_buf(),
        }
    }
}

impl Manifest {
    fn trees(&self, jdir: &Path) -> Vec<TreeRef<'_>> {
        std::iter::once(TreeRef {
            root: &self.workspace,
            upper: &self.upper,
            dir: jdir.to_path_buf(),
            ops: &self.ops,
            shown: None,
        })
        .chain(self.extra.iter().map(|t| TreeRef {
            root: &t.root,
            upper: &t.upper,
            dir: t.dir.clone(),
            ops: &t.ops,
            shown: Some(&t.root),
        }))
        .collect()
    }

    /// Every change, the workspace's relative, a `write=` tree's absolute.
    pub(crate) fn changes(&self) -> Vec<Change> {
        let mut v: Vec<Change> = self.ops.iter().map(Op::change).collect();
        for t in &self.extra {
            v.extend(t.ops.iter().map(|op| {
                let mut c = op.change();
                c.path = t.root.join(&c.path);
                c
            }));
        }
        v
    }
}

/// Remove a journal and the `write=` trees' journal dirs it names.
fn remove_journal(jdir: &Path) -> std::io::Result<()> {
    if let Ok(m) = read_manifest(jdir) {
        for t in &m.extra {
            remove_tree(&t.dir)?;
        }
    }
    remove_tree(jdir)
}

/// The `committed` marker's content.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Committed {
    /// The precise clock after the last step, written once the coarse clock is past it (as
    /// [`settle`]): an entry with a later ctime changed since.
    at: [i64; 2],
}

pub(crate) enum ApplyError {
    Stopped(usize),
    Conflict(Problem),
    Io(PathBuf, std::io::Error),
    Journal(String),
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Parent directories opened one component at a time, the last one cached (ops come grouped
/// by directory).
struct Dirs<'a> {
    root: &'a OwnedFd,
    last: Option<(PathBuf, OwnedFd)>,
}

impl Dirs<'_> {
    fn get(&mut self, rel: &Path) -> Result<&OwnedFd, Errno> {
        if self.last.as_ref().is_none_or(|(p, _)| p != rel) {
            self.last = Some((rel.to_path_buf(), open_beneath(self.root, rel)?));
        }
        Ok(&self.last.as_ref().expect("just set").1)
    }
}

/// The open directories of one tree: its host root and its upper dir.
pub(crate) struct TreeFds {
    pub root: OwnedFd,
    pub upper: OwnedFd,
}

fn mkdir_private(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Run the manifest's steps, journaling pre-images; any failure rolls back what ran. `fds` are
/// the trees' in [`Manifest::trees`] order.
pub(crate) fn apply(
    m: &Manifest,
    jdir: &Path,
    fds: &[TreeFds],
    stop_after: Option<usize>,
) -> Result<(), ApplyError> {
    let trees = m.trees(jdir);
    let jio = |e: std::io::Error| ApplyError::Io(jdir.to_path_buf(), e);
    for t in &trees {
        mkdir_private(&t.dir).map_err(jio)?;
        std::fs::create_dir(t.dir.join("pre")).map_err(jio)?;
    }
    // A complete manifest without `committed` is what `recover` rolls back (`state_of`); a torn
    // one means no step ran. It is on disk (file, journal dir, and the dir holding that) before
    // the first step: no `applying` marker. The new content need not be yet — until
    // `committed`, a crash rolls every step back and the new entries are discarded with their
    // content — so this is three fsyncs, not a syncfs of the whole filesystem (every other
    // process's dirty data, 10-90 ms under a build); the syncfs after the steps makes the new
    // content and the renames durable before `committed` says so. The pre dirs made above come
    // first in the filesystem's own order, before any rename into them.
    let manifest = serde_json::to_vec(m).map_err(|e| jio(std::io::Error::other(e)))?;
    write_synced(&jdir.join("manifest.json"), &manifest).map_err(jio)?;
    if let Some(parent) = jdir.parent() {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(jio)?;
    }
    let mut steps = 0usize;
    let mut result = Ok(());
    for (t, fd) in trees.iter().zip(fds) {
        let pre = match open_root(&t.dir.join("pre")) {
            Ok(p) => p,
            Err(e) => {
                result = Err(jio(e.into()));
                break;
            }
        };
        result = steps_forward(t, fd, &pre, m.started, stop_after, &mut steps);
        if result.is_err() {
            break;
        }
    }
    match result {
        Ok(()) => {}
        Err(ApplyError::Stopped(n)) => return Err(ApplyError::Stopped(n)),
        Err(e) => {
            return match rollback(m, jdir, fds) {
                Ok(()) => Err(e),
                Err(r) => Err(ApplyError::Journal(r)),
            }
        }
    }
    // The boundary is read before the flush and waited past after it: the flush outlasts the
    // coarse clock's tick, so the wait is over by then (`settle` after the flush waited up to a
    // tick more). The same boundary: every step is at or before `at`, and `committed` is
    // written only once every later change is stamped after it.
    let at = precise_now();
    for (t, fd) in trees.iter().zip(fds) {
        fsx::syncfs(&fd.root).map_err(|e| ApplyError::Io(t.root.to_path_buf(), e.into()))?;
    }
    wait_past(at);
    let committed =
        serde_json::to_vec(&Committed { at }).map_err(|e| jio(std::io::Error::other(e)))?;
    write_synced(&jdir.join("committed"), &committed).map_err(jio)?;
    Ok(())
}

fn steps_forward(
    t: &TreeRef<'_>,
    fds: &TreeFds,
    pre: &OwnedFd,
    started: [i64; 2],
    stop_after: Option<usize>,
    steps: &mut usize,
) -> Result<(), ApplyError> {
    let mut host_dirs = Dirs {
        root: &fds.root,
        last: None,
    };
    // Inodes already moved into the journal: the rename itself updated their ctime, and another
    // name of the same (hard-linked) inode must not read that as a host change.
    let mut moved = std::collections::HashSet::new();
    let mut upper_dirs = Dirs {
        root: &fds.upper,
        last: None,
    };
    let step = |steps: &mut usize| {
        *steps += 1;
        match stop_after {
            Some(n) if *steps >= n => Err(ApplyError::Stopped(*steps)),
            _ => Ok(()),
        }
    };
    for (n, op) in t.ops.iter().enumerate() {
        let Some((parent, name)) = op.split() else {
            continue;
        };
        // The path as shown, built only for an error (unescaping it per op is a cost per file).
        let rel = || t.show(&op.rel());
        let conflict = |why: String| ApplyError::Conflict(Problem { path: rel(), why });
        let host = host_dirs
            .get(&parent)
            .map_err(|e| conflict(format!("host directory changed during the commit: {e}")))?;
        if let Some(old) = op.old {
            // Re-check just before moving it: the same inode, not changed since the start.
            match lstat_at(host, &name) {
                Ok(Some(st))
                    if st.st_ino == old && (fsx::ctime(&st) <= started || moved.contains(&old)) => {
                }
                _ => return Err(conflict("changed on the host after the run started".into())),
            }
            move_noreplace(host, &name, pre, OsStr::new(&n.to_string()))
                .map_err(|e| ApplyError::Io(rel(), e.into()))?;
            moved.insert(old);
            step(steps)?;
        }
        if op.new.is_some() {
            let from = upper_dirs
                .get(&parent)
                .map_err(|e| ApplyError::Io(rel(), e.into()))?;
            match move_noreplace(from, &name, host, &name) {
                Ok(()) => {}
                Err(Errno::EEXIST | Errno::ENOTEMPTY) => {
                    return Err(conflict("created on the host after the run started".into()))
                }
                Err(e) => return Err(ApplyError::Io(rel(), e.into())),
            }
            step(steps)?;
        }
        if let Some((_, new_mode)) = op.mode {
            fsx::chmod_dir_at(host, &name, new_mode)
                .map_err(|e| ApplyError::Io(rel(), e.into()))?;
            step(steps)?;
        }
    }
    Ok(())
}

/// Undo whatever steps of an unfinished commit ran (idempotent; also used by `recover`): new
/// entries go back to the upper dirs, pre-images back in place, modes back; the later trees
/// first.
fn rollback(m: &Manifest, jdir: &Path, fds: &[TreeFds]) -> Result<(), String> {
    let trees = m.trees(jdir);
    let mut failures = Vec::new();
    for (t, fd) in trees.iter().zip(fds).rev() {
        rollback_tree(t, fd, &mut failures);
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    for fd in fds {
        let _ = fsx::syncfs(&fd.root);
    }
    remove_journal(jdir).map_err(|e| format!("remove journal: {e}"))
}

fn rollback_tree(t: &TreeRef<'_>, fds: &TreeFds, failures: &mut Vec<String>) {
    let pre = match open_root(&t.dir.join("pre")) {
        Ok(p) => p,
        // Never created: no step of this tree ran.
        Err(Errno::ENOENT) => return,
        Err(e) => {
            failures.push(format!("journal {}: {e}", t.dir.display()));
            return;
        }
    };
    for (n, op) in t.ops.iter().enumerate().rev() {
        let Some((parent, name)) = op.split() else {
            continue;
        };
        let rel = t.show(&op.rel());
        let Ok(host) = open_beneath(&fds.root, &parent) else {
            // The parent is reached only through directories the commit never moves.
            if op.new.is_some() || op.old.is_some() {
                failures.push(format!("{}: host directory gone", rel.display()));
            }
            continue;
        };
        if let Some((old_mode, _)) = op.mode {
            let _ = fsx::chmod_dir_at(&host, &name, old_mode);
        }
        if let Some(new) = op.new {
            if let Ok(Some(st)) = lstat_at(&host, &name) {
                if st.st_ino == new {
                    let back = open_beneath(&fds.upper, &parent)
                        .and_then(|up| move_noreplace(&host, &name, &up, &name));
                    if let Err(e) = back {
                        failures.push(format!("{}: {e}", rel.display()));
                        continue;
                    }
                }
            }
        }
        let slot = OsString::from(n.to_string());
        if op.old.is_some() && matches!(lstat_at(&pre, &slot), Ok(Some(_))) {
            if let Err(e) = move_noreplace(&pre, &slot, &host, &name) {
                failures.push(format!(
                    "{}: cannot restore (kept in {}): {e}",
                    rel.display(),
                    t.dir.join("pre").join(&slot).display()
                ));
            }
        }
    }
}

/// A committed (or undone) run in the journal.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Run id.
    pub run_id: String,
    /// Workspace it was committed to.
    pub workspace: PathBuf,
    /// Where it stands.
    pub state: JournalState,
    /// Unix seconds of the commit (0 if not committed).
    pub committed_at: i64,
    /// Bytes of pre-images kept.
    pub journal_bytes: u64,
    /// The changes.
    pub changes: Vec<Change>,
}

/// Where a journaled run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalState {
    /// Steps may have run, not all (a crash): `recover` rolls it back.
    Applying,
    /// Committed; `undo` can restore the pre-images.
    Committed,
    /// An undo started and did not finish: `recover` finishes it.
    Undoing,
    /// Undone.
    Undone,
}

fn state_of(jdir: &Path) -> JournalState {
    let has = |n: &str| jdir.join(n).exists();
    if has("undone") {
        JournalState::Undone
    } else if has("undoing") {
        JournalState::Undoing
    } else if has("committed") {
        JournalState::Committed
    } else {
        JournalState::Applying
    }
}

fn read_manifest(jdir: &Path) -> std::io::Result<Manifest> {
    let bytes = std::fs::read(jdir.join("manifest.json"))?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

fn read_committed(jdir: &Path) -> Option<Committed> {
    serde_json::from_slice(&std::fs::read(jdir.join("committed")).ok()?).ok()
}

fn entry(jdir: &Path) -> Option<JournalEntry> {
    let m = read_manifest(jdir).ok()?;
    Some(JournalEntry {
        run_id: m.run_id.clone(),
        workspace: m.workspace.clone(),
        state: state_of(jdir),
        committed_at: read_committed(jdir).map_or(0, |c| c.at[0]),
        journal_bytes: m.journal_bytes,
        changes: m.changes(),
    })
}

fn journal_dirs(state_dir: &Path) -> Vec<(Store, PathBuf)> {
    let mut out = Vec::new();
    for store in store::stores(state_dir) {
        if let Ok(rd) = std::fs::read_dir(store.journal()) {
            for e in rd.flatten() {
                out.push((store.clone(), e.path()));
            }
        }
    }
    out
}

/// Every journaled run, newest first (for `cmdgate runs`).
pub fn runs(state_dir: &Path) -> Vec<JournalEntry> {
    let mut v: Vec<JournalEntry> = journal_dirs(state_dir)
        .iter()
        .filter_map(|(_, d)| entry(d))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.committed_at));
    v
}

/// Why an undo did nothing.
#[derive(Clone, Debug, thiserror::Error, Serialize, Deserialize)]
pub enum UndoError {
    /// No such committed run in the journal (never committed, pruned, or a bad id).
    #[error("no committed run {0} in the journal")]
    NotFound(String),
    /// Already undone.
    #[error("run {0} was already undone")]
    AlreadyUndone(String),
    /// Paths changed after the commit: undoing would destroy those changes.
    #[error("changed since the commit, so nothing was undone: {}", super::list(.0))]
    Conflict(Vec<Problem>),
    /// Filesystem error before anything was undone, or a failed undo step (the journal says
    /// `undoing`; `recover` finishes it).
    #[error("undo failed: {0}")]
    Io(String),
}

/// What an undo restored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UndoReport {
    /// The run.
    pub run_id: String,
    /// The paths restored to their pre-commit state.
    pub restored: Vec<PathBuf>,
}

fn find(state_dir: &Path, run_id: &str) -> Option<PathBuf> {
    valid_id(run_id).ok()?;
    store::stores(state_dir)
        .into_iter()
        .map(|s| s.journal().join(run_id))
        .find(|d| d.join("manifest.json").exists())
}

/// Is the subtree at `dir/name` unchanged since `at` (every ctime before or at it)?
fn unchanged_since(dir: &OwnedFd, name: &OsStr, at: [i64; 2], rel: &Path, out: &mut Vec<Problem>) {
    let Ok(Some(st)) = lstat_at(dir, name) else {
        return;
    };
    if fsx::ctime(&st) > at {
        out.push(Problem {
            path: rel.to_path_buf(),
            why: "changed after the commit".into(),
        });
        return;
    }
    if fsx::kind(&st) == libc::S_IFDIR {
        if let Ok(sub) = open_dir_at(dir, name) {
            for child in super::names(&sub).unwrap_or_default() {
                unchanged_since(&sub, &child, at, &rel.join(&child), out);
            }
        }
    }
}

/// Restore the workspace (and the kept `write=` trees) to before run `run_id`'s commit, if
/// nothing it committed changed since (each post-image is checked first; any change ⇒ nothing is
/// undone).
pub fn undo(state_dir: &Path, run_id: &str) -> Result<UndoReport, UndoError> {
    let jdir = find(state_dir, run_id).ok_or_else(|| UndoError::NotFound(run_id.into()))?;
    match state_of(&jdir) {
        JournalState::Committed => {}
        JournalState::Undone => return Err(UndoError::AlreadyUndone(run_id.into())),
        JournalState::Applying | JournalState::Undoing => {
            return Err(UndoError::Io(
                "the journal is mid-operation; recover() repairs it first".into(),
            ))
        }
    }
    let m = read_manifest(&jdir).map_err(|e| UndoError::Io(e.to_string()))?;
    let at = read_committed(&jdir)
        .ok_or_else(|| UndoError::Io("unreadable committed marker".into()))?
        .at;
    let trees = m.trees(&jdir);
    let roots = trees
        .iter()
        .map(|t| fsx::open_host_root(t.root))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UndoError::Io(e.to_string()))?;
    // Git's lock, as the commit took it, when the undo puts back anything under `.git/`: a git
    // on the host neither writes the index while it is restored nor is overwritten mid-write.
    let paths: Vec<PathBuf> = m.ops.iter().map(Op::rel).collect();
    let _git_lock = match super::gitlock::lock(&roots[0], &paths, run_id) {
        Ok(lock) => lock,
        Err(
            super::gitlock::LockError::Busy(problem)
            | super::gitlock::LockError::LeftByRun(problem),
        ) => return Err(UndoError::Conflict(vec![problem])),
        Err(super::gitlock::LockError::Io(path, e)) => {
            return Err(UndoError::Io(format!("{}: {e}", path.display())))
        }
    };
    let mut problems = Vec::new();
    for (t, root) in trees.iter().zip(&roots) {
        undo_check(t, root, at, &mut problems);
    }
    if !problems.is_empty() {
        return Err(UndoError::Conflict(problems));
    }
    write_synced(&jdir.join("undoing"), b"").map_err(|e| UndoError::Io(e.to_string()))?;
    undo_steps(&m, &jdir, &roots).map_err(UndoError::Io)?;
    Ok(UndoReport {
        run_id: m.run_id.clone(),
        restored: m.changes().into_iter().map(|c| c.path).collect(),
    })
}

/// Is every post-image of tree `t` still what the commit put there?
fn undo_check(t: &TreeRef<'_>, root: &OwnedFd, at: [i64; 2], problems: &mut Vec<Problem>) {
    for op in t.ops {
        let Some((parent, name)) = op.split() else {
            continue;
        };
        let rel = t.show(&op.rel());
        let host = match open_beneath(root, &parent) {
            Ok(h) => h,
            Err(e) => {
                problems.push(Problem {
                    path: rel,
                    why: format!("its directory changed after the commit: {e}"),
                });
                continue;
            }
        };
        let now = lstat_at(&host, &name).ok().flatten();
        match (op.new, &now) {
            (Some(new), Some(st)) if st.st_ino == new => {
                unchanged_since(&host, &name, at, &rel, problems)
            }
            (Some(_), _) => problems.push(Problem {
                path: rel.clone(),
                why: "replaced or removed after the commit".into(),
            }),
            (None, Some(_)) if op.old.is_some() => problems.push(Problem {
                path: rel.clone(),
                why: "created again after the commit deleted it".into(),
            }),
            (None, _) => {}
        }
        if let (Some((_, new_mode)), Some(st)) = (op.mode, &now) {
            if st.st_mode & 0o7777 != new_mode {
                problems.push(Problem {
                    path: rel,
                    why: "mode changed after the commit".into(),
                });
            }
        }
    }
}

/// The undo's steps, idempotent (also finishes an interrupted undo in `recover`); `roots` in
/// [`Manifest::trees`] order.
fn undo_steps(m: &Manifest, jdir: &Path, roots: &[OwnedFd]) -> Result<(), String> {
    let trees = m.trees(jdir);
    let mut failures = Vec::new();
    for (t, root) in trees.iter().zip(roots).rev() {
        undo_tree(t, root, &mut failures)?;
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    for root in roots {
        let _ = fsx::syncfs(root);
    }
    write_synced(&jdir.join("undone"), b"").map_err(|e| format!("journal: {e}"))?;
    // The undone run's entries are discarded; the manifest stays (for `runs`) until pruned.
    for t in &trees {
        let _ = remove_tree(&t.dir.join("undone-entries"));
    }
    Ok(())
}

fn undo_tree(t: &TreeRef<'_>, ws: &OwnedFd, failures: &mut Vec<String>) -> Result<(), String> {
    let undone = t.dir.join("undone-entries");
    match std::fs::create_dir(&undone) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("journal: {e}")),
    }
    let undone_fd = open_root(&undone).map_err(|e| format!("journal: {e}"))?;
    let pre = open_root(&t.dir.join("pre")).map_err(|e| format!("journal: {e}"))?;
    for (n, op) in t.ops.iter().enumerate().rev() {
        let Some((parent, name)) = op.split() else {
            continue;
        };
        let rel = t.show(&op.rel());
        let host = match open_beneath(ws, &parent) {
            Ok(h) => h,
            Err(e) => {
                failures.push(format!("{}: {e}", rel.display()));
                continue;
            }
        };
        if let Some((old_mode, _)) = op.mode {
            let _ = fsx::chmod_dir_at(&host, &name, old_mode);
        }
        let slot = OsString::from(n.to_string());
        if let Some(new) = op.new {
            if matches!(lstat_at(&host, &name), Ok(Some(st)) if st.st_ino == new) {
                if let Err(e) = move_noreplace(&host, &name, &undone_fd, &slot) {
                    failures.push(format!("{}: {e}", rel.display()));
                    continue;
                }
            }
        }
        if op.old.is_some() && matches!(lstat_at(&pre, &slot), Ok(Some(_))) {
            if let Err(e) = move_noreplace(&pre, &slot, &host, &name) {
                failures.push(format!("{}: {e}", rel.display()));
            }
        }
    }
    Ok(())
}

/// What `recover` did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RecoverReport {
    /// Commits interrupted by a crash, rolled back (nothing of them remains).
    pub rolled_back: Vec<String>,
    /// Undos interrupted by a crash, finished.
    pub undo_finished: Vec<String>,
    /// Kept upper dirs of runs whose owner is gone, discarded.
    pub discarded: Vec<String>,
    /// Journals that could not be repaired (kept; named with the reason).
    pub failed: Vec<String>,
    /// Spent dirs another process left in a store's `trash/` (it ended before removing them:
    /// `trash`), removed.
    #[serde(default)]
    pub trash: Vec<String>,
}

/// At daemon start, before serving: repair the journal (roll back interrupted commits, finish
/// interrupted undos), discard the upper dirs of runs nobody will commit (not kept, helper
/// gone) and empty the stores' `trash/` of what other processes left there. Never call it
/// while this state dir has runs in flight.
pub fn recover(state_dir: &Path) -> RecoverReport {
    let mut report = RecoverReport::default();
    for (_, jdir) in journal_dirs(state_dir) {
        let id = jdir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(m) = read_manifest(&jdir) else {
            // Crashed before the manifest was complete: no step ran.
            let _ = remove_tree(&jdir);
            report.rolled_back.push(id);
            continue;
        };
        let trees = m.trees(&jdir);
        let roots = trees
            .iter()
            .map(|t| fsx::open_host_root(t.root))
            .collect::<Result<Vec<_>, _>>();
        match (state_of(&jdir), roots) {
            (JournalState::Applying, Ok(roots)) => {
                let fds = roots
                    .into_iter()
                    .zip(&trees)
                    .map(|(root, t)| open_root(t.upper).map(|upper| TreeFds { root, upper }))
                    .collect::<Result<Vec<_>, _>>();
                match fds.map(|fds| (rollback(&m, &jdir, &fds), fds)) {
                    Ok((Ok(()), fds)) => {
                        if let Some(ws) = fds.first() {
                            super::gitlock::release_stale(&ws.root, &id);
                        }
                        report.rolled_back.push(id)
                    }
                    Ok((Err(e), _)) => report.failed.push(format!("{id}: {e}")),
                    Err(e) => report.failed.push(format!("{id}: {e}")),
                }
            }
            (JournalState::Undoing, Ok(roots)) => match undo_steps(&m, &jdir, &roots) {
                Ok(()) => {
                    // The lock an interrupted undo took (the same marker as a commit's).
                    if let Some(ws) = roots.first() {
                        super::gitlock::release_stale(ws, &id);
                    }
                    report.undo_finished.push(id)
                }
                Err(e) => report.failed.push(format!("{id}: {e}")),
            },
            (JournalState::Committed | JournalState::Undone, _) => {}
            (_, Err(e)) => report.failed.push(format!("{id}: {e}")),
        }
    }
    if !report.rolled_back.is_empty() || !report.undo_finished.is_empty() {
        // What was just put back carries ctimes (fine-grained ones may run ahead of the coarse
        // clock) that a run starting right after us must see as older than its start, or its
        // commit would report a spurious conflict.
        settle();
    }
    let now = crate::mirror::unix_now();
    for store in store::stores(state_dir) {
        report.trash.extend(crate::trash::empty(&store.trash()));
        let Ok(rd) = std::fs::read_dir(store.runs()) else {
            continue;
        };
        for e in rd.flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            let meta: Option<Meta> = std::fs::read(e.path().join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let kept = meta.is_some_and(|m| m.keep_until.is_some_and(|t| t > now));
            if !kept && !helper_alive(state_dir, &id) && remove_tree(&e.path()).is_ok() {
                report.discarded.push(id);
            }
        }
    }
    report
}

/// Whether the helper of run `id` still holds its lock (a live run).
fn helper_alive(state_dir: &Path, id: &str) -> bool {
    let lock = state_dir.join("runs").join(format!("{id}.lock"));
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(lock)
    else {
        return false;
    };
    // Taken (and released at once) only when no helper holds it.
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
}

/// How much journal to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLimits {
    /// Journaled runs older than this are dropped (no undo past it).
    pub max_age: Duration,
    /// Total pre-image bytes kept; the oldest runs go first past it.
    pub max_bytes: u64,
}

impl Default for JournalLimits {
    /// A week, 2 GiB.
    fn default() -> Self {
        JournalLimits {
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: 2 << 30,
        }
    }
}

/// Drop journaled runs past the limits (committed or undone ones only) and kept upper dirs past
/// their `keep_for`. Returns the run ids dropped. Safe while runs are in flight.
pub fn prune(state_dir: &Path, limits: &JournalLimits) -> Vec<String> {
    let now = crate::mirror::unix_now() as i64;
    let mut done: Vec<(i64, u64, PathBuf, String)> = journal_dirs(state_dir)
        .into_iter()
        .filter(|(_, d)| matches!(state_of(d), JournalState::Committed | JournalState::Undone))
        .filter_map(|(_, d)| {
            let e = entry(&d)?;
            Some((e.committed_at, e.journal_bytes, d, e.run_id))
        })
        .collect();
    done.sort_by_key(|(at, ..)| std::cmp::Reverse(*at)); // newest first
    let mut dropped = Vec::new();
    let mut total = 0u64;
    for (at, bytes, dir, id) in done {
        total += bytes;
        let too_old = now - at >= limits.max_age.as_secs() as i64;
        if (too_old || total > limits.max_bytes) && remove_journal(&dir).is_ok() {
            dropped.push(id);
        }
    }
    for store in store::stores(state_dir) {
        let Ok(rd) = std::fs::read_dir(store.runs()) else {
            continue;
        };
        for e in rd.flatten() {
            let meta: Option<Meta> = std::fs::read(e.path().join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if meta.is_some_and(|m| m.keep_until.is_some_and(|t| (t as i64) <= now))
                && remove_tree(&e.path()).is_ok()
            {
                dropped.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    dropped
}

/// One step of a journaled commit, for the diff (`super::diff`).
pub(crate) struct Step {
    pub path: PathBuf,
    /// The inode the commit put at `path`.
    pub new: Option<u64>,
    /// A pre-image is in `pre/<index>`.
    pub old: bool,
    pub mode: Option<(u32, u32)>,
}

/// A journaled run as the diff reads it.
pub(crate) struct View {
    pub workspace: PathBuf,
    pub pre: PathBuf,
    pub state: JournalState,
    pub steps: Vec<Step>,
    /// The `write=` trees committed with it.
    pub extra: Vec<ExtraView>,
}

/// A `write=` tree of a journalled run.
pub(crate) struct ExtraView {
    pub root: PathBuf,
    pub pre: PathBuf,
    pub steps: Vec<Step>,
}

fn steps_of(ops: &[Op]) -> Vec<Step> {
    ops.iter()
        .map(|op| Step {
            path: op.rel(),
            new: op.new,
            old: op.old.is_some(),
            mode: op.mode,
        })
        .collect()
}

/// The journal of run `run_id`, if it has one.
pub(crate) fn view(state_dir: &Path, run_id: &str) -> Option<View> {
    let jdir = find(state_dir, run_id)?;
    let m = read_manifest(&jdir).ok()?;
    Some(View {
        workspace: m.workspace.clone(),
        pre: jdir.join("pre"),
        state: state_of(&jdir),
        steps: steps_of(&m.ops),
        extra: m
            .extra
            .iter()
            .map(|t| ExtraView {
                root: t.root.clone(),
                pre: t.dir.join("pre"),
                steps: steps_of(&t.ops),
            })
            .collect(),
    })
}

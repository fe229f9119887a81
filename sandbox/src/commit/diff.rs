//! A mirrored run's effects on the workspace as the operator reads them (`cmdgate runs show RUN
//! --diff`): a unified diff for text files, one summary line for everything else (binary content,
//! size, type change, mode change, symlink target, deletion), bounded, with a note when cut.
//!
//! ```text
//! kept run (rolled back, waiting for `apply`)   upper dir  vs  the workspace now
//!     merged dirs: only the entries the run touched; whiteouts are deletions; an opaque dir is
//!     the whole subtree replaced (compared entry by entry with what the host has)
//! committed run (journal)                       pre/<n>    vs  the entry the commit put there
//!     an entry changed since the commit is named, not diffed (it is no longer the run's)
//! undone run                                    nothing of it remains to show
//! ```
//!
//! Host entries are read from the workspace's fd one component at a time with `O_NOFOLLOW`
//! (`fsx`): a symlink the agent planted is shown as a symlink, never followed into a secret.
//! Only regular files are read, at most `DiffLimits::max_file_bytes` of each.

use super::fsx::{self, kind, lstat_at, open_beneath, open_dir_at, open_root};
use super::journal;
use crate::mirror::load_kept;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode};
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// How much a diff may show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffLimits {
    /// Bytes of unified diff text; past it the rest is summarised in the note.
    pub max_output: usize,
    /// A regular file larger than this (either side) is summarised, not diffed.
    pub max_file_bytes: u64,
    /// Entries listed; past it the walk stops and the note says so.
    pub max_files: usize,
}

impl Default for DiffLimits {
    /// 256 KiB of text, files up to 1 MiB diffed, 10,000 entries.
    fn default() -> Self {
        DiffLimits {
            max_output: 256 << 10,
            max_file_bytes: 1 << 20,
            max_files: 10_000,
        }
    }
}

/// Where the diff comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffSource {
    /// A kept upper dir (a rolled-back run) against the workspace now: what `apply` would do.
    Kept,
    /// A committed run's journal: its pre-images against what the commit put in place.
    Journal,
    /// An undone run: nothing of it is left to show.
    Undone,
}

/// What happened to one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileChange {
    Added,
    Deleted,
    Modified,
    /// File ↔ directory ↔ symlink.
    TypeChanged,
    /// Permission bits only.
    ModeChanged,
    /// Changed after the commit: no longer the run's, not shown.
    ChangedSince,
}

/// One path of the diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// Workspace-relative path.
    #[serde(with = "crate::model::lossless_path")]
    pub path: PathBuf,
    pub change: FileChange,
    /// Lines added and removed (text files; 0 for summaries).
    pub insertions: u64,
    pub deletions: u64,
    /// The one-line summary when there is no text diff (binary, size, type, mode, target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Totals, for the one-line stat ("3 files changed, +40 -2").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffStat {
    pub files: u64,
    pub insertions: u64,
    pub deletions: u64,
}

impl std::fmt::Display for DiffStat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.files == 1 { "" } else { "s" };
        write!(
            f,
            "{} file{s} changed, +{} -{}",
            self.files, self.insertions, self.deletions
        )
    }
}

/// A run's diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDiff {
    pub run_id: String,
    pub workspace: PathBuf,
    pub source: DiffSource,
    pub stat: DiffStat,
    /// Every path, in walk order (complete unless `truncated` says the walk stopped).
    pub files: Vec<FileDiff>,
    /// The unified diff and summary lines, at most `DiffLimits::max_output` bytes.
    pub text: String,
    /// The text (or the walk) was cut; `note` says what is missing.
    pub truncated: bool,
    /// Every changed path is in `files` (the walk was not cut).
    pub complete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Why no diff could be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// No kept upper dir and no journal for this id (never kept, pruned, applied, or a bad id).
    #[error("no kept or committed run {0} (never kept, pruned since, or already applied and its journal pruned)")]
    NotFound(String),
    #[error("cannot read run {0}: {1}")]
    Io(String, String),
}

/// One side of a comparison: an entry `name` in the directory open at `dir`.
#[derive(Clone, Copy)]
struct At<'a> {
    dir: &'a OwnedFd,
    name: &'a OsStr,
    st: FileStat,
}

impl<'a> At<'a> {
    fn lookup(dir: &'a OwnedFd, name: &'a OsStr) -> Option<At<'a>> {
        lstat_at(dir, name)
            .ok()
            .flatten()
            .map(|st| At { dir, name, st })
    }
    fn is_dir(&self) -> bool {
        kind(&self.st) == libc::S_IFDIR
    }
}

/// What an upper entry is, read like the commit reads it (`trusted.overlay.*` only).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Upper {
    Whiteout,
    OpaqueDir,
    Dir,
    Other,
}

fn classify_upper(path: &Path, st: &FileStat) -> Upper {
    let k = kind(st);
    if k == libc::S_IFCHR && st.st_rdev == 0 {
        return Upper::Whiteout;
    }
    if k == libc::S_IFREG && fsx::xattr(path, "trusted.overlay.whiteout").is_some() {
        return Upper::Whiteout;
    }
    if k != libc::S_IFDIR {
        return Upper::Other;
    }
    match fsx::xattr(path, "trusted.overlay.opaque").as_deref() {
        Some(b"y") => Upper::OpaqueDir,
        _ => Upper::Dir,
    }
}

/// Collects the diff within its limits.
struct Writer {
    limits: DiffLimits,
    files: Vec<FileDiff>,
    stat: DiffStat,
    text: String,
    text_cut: usize,
    walk_cut: bool,
    /// Paths are shown under this (empty for the workspace; a `write=` tree's absolute root).
    prefix: PathBuf,
}

fn kind_name(st: &FileStat) -> &'static str {
    match kind(st) {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR | libc::S_IFBLK => "device",
        _ => "entry",
    }
}

fn show(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Read a regular file (never through a symlink, never blocking on a fifo swapped in), at most
/// `max` bytes; `None` when it is larger or unreadable.
fn read_file(at: &At<'_>, max: u64) -> Option<Vec<u8>> {
    if kind(&at.st) != libc::S_IFREG || at.st.st_size as u64 > max {
        return None;
    }
    let fd = nix::fcntl::openat(
        at.dir,
        at.name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    if kind(&st) != libc::S_IFREG {
        return None;
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .ok()?;
    (buf.len() as u64 <= max).then_some(buf)
}

fn read_link(at: &At<'_>) -> String {
    nix::fcntl::readlinkat(at.dir, at.name)
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("<unreadable: {e}>"))
}

fn text_of(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

impl Writer {
    fn new(limits: DiffLimits) -> Writer {
        Writer {
            limits,
            files: Vec::new(),
            stat: DiffStat::default(),
            text: String::new(),
            text_cut: 0,
            walk_cut: false,
            prefix: PathBuf::new(),
        }
    }

    fn full(&mut self) -> bool {
        if self.files.len() >= self.limits.max_files {
            self.walk_cut = true;
        }
        self.walk_cut
    }

    fn push_text(&mut self, chunk: &str) {
        if self.text_cut > 0 || self.text.len() + chunk.len() > self.limits.max_output {
            self.text_cut += 1;
        } else {
            self.text.push_str(chunk);
        }
    }

    fn record(
        &mut self,
        rel: &Path,
        change: FileChange,
        ins: u64,
        del: u64,
        summary: Option<String>,
    ) {
        if self.full() {
            return;
        }
        self.stat.files += 1;
        self.stat.insertions += ins;
        self.stat.deletions += del;
        self.files.push(FileDiff {
            path: self.prefix.join(rel),
            change,
            insertions: ins,
            deletions: del,
            summary,
        });
    }

    fn summary(&mut self, rel: &Path, change: FileChange, line: String) {
        if self.full() {
            return;
        }
        let p = show(&self.prefix.join(rel));
        self.push_text(&format!("diff a/{p} b/{p}\n{line}\n"));
        self.record(rel, change, 0, 0, Some(line));
    }

    /// A text diff between two regular files (either may be absent); false when not text.
    fn text_diff(&mut self, rel: &Path, old: Option<&At<'_>>, new: Option<&At<'_>>) -> bool {
        let max = self.limits.max_file_bytes;
        let read = |a: Option<&At<'_>>| match a {
            None => Some(Vec::new()),
            Some(a) => read_file(a, max),
        };
        let (Some(ob), Some(nb)) = (read(old), read(new)) else {
            return false;
        };
        let (Some(ot), Some(nt)) = (text_of(&ob), text_of(&nb)) else {
            return false;
        };
        let change = match (old, new) {
            (None, _) => FileChange::Added,
            (_, None) => FileChange::Deleted,
            _ => FileChange::Modified,
        };
        let diff = similar::TextDiff::from_lines(ot, nt);
        let (mut ins, mut del) = (0u64, 0u64);
        for op in diff.ops() {
            for c in diff.iter_changes(op) {
                match c.tag() {
                    similar::ChangeTag::Insert => ins += 1,
                    similar::ChangeTag::Delete => del += 1,
                    similar::ChangeTag::Equal => {}
                }
            }
        }
        let p = show(&self.prefix.join(rel));
        let a = if old.is_some() {
            format!("a/{p}")
        } else {
            "/dev/null".into()
        };
        let b = if new.is_some() {
            format!("b/{p}")
        } else {
            "/dev/null".into()
        };
        let mut chunk = format!("diff a/{p} b/{p}\n");
        match change {
            FileChange::Added => chunk.push_str(&format!(
                "new file, mode {:o}\n",
                new.map_or(0, |n| n.st.st_mode & 0o7777)
            )),
            FileChange::Deleted => chunk.push_str("deleted file\n"),
            _ => {}
        }
        if ins + del == 0 && change != FileChange::Modified {
            chunk.push_str("(empty)\n");
        } else {
            let mut u = diff.unified_diff();
            u.context_radius(3).header(&a, &b);
            chunk.push_str(&u.to_string());
            if !chunk.ends_with('\n') {
                chunk.push('\n');
            }
        }
        self.push_text(&chunk);
        self.record(rel, change, ins, del, None);
        true
    }

    /// Two non-directory entries (either may be absent).
    fn leaf(&mut self, rel: &Path, old: Option<At<'_>>, new: Option<At<'_>>) {
        if self.full() {
            return;
        }
        let reg = |a: &Option<At<'_>>| a.as_ref().is_none_or(|a| kind(&a.st) == libc::S_IFREG);
        match (&old, &new) {
            (None, None) => {}
            (Some(o), Some(n)) if kind(&o.st) == libc::S_IFREG && kind(&n.st) == libc::S_IFREG => {
                let max = self.limits.max_file_bytes;
                let same = match (read_file(o, max), read_file(n, max)) {
                    (Some(a), Some(b)) => Some(a == b),
                    _ => None,
                };
                let (om, nm) = (o.st.st_mode & 0o7777, n.st.st_mode & 0o7777);
                if same == Some(true) {
                    if om != nm {
                        self.summary(
                            rel,
                            FileChange::ModeChanged,
                            format!("mode {om:o} → {nm:o}"),
                        );
                    }
                    return;
                }
                if self.text_diff(rel, Some(o), Some(n)) {
                    if om != nm {
                        self.push_text(&format!("mode {om:o} → {nm:o}\n"));
                    }
                    return;
                }
                let mode = if om != nm {
                    format!(", mode {om:o} → {nm:o}")
                } else {
                    String::new()
                };
                self.summary(
                    rel,
                    FileChange::Modified,
                    format!(
                        "binary or large file changed: {} → {} bytes{mode}",
                        o.st.st_size, n.st.st_size
                    ),
                );
            }
            (None, Some(n)) if reg(&new) => {
                if !self.text_diff(rel, None, Some(n)) {
                    self.summary(
                        rel,
                        FileChange::Added,
                        format!(
                            "new binary or large file: {} bytes, mode {:o}",
                            n.st.st_size,
                            n.st.st_mode & 0o7777
                        ),
                    );
                }
            }
            (Some(o), None) if reg(&old) => {
                if !self.text_diff(rel, Some(o), None) {
                    self.summary(
                        rel,
                        FileChange::Deleted,
                        format!("deleted binary or large file: {} bytes", o.st.st_size),
                    );
                }
            }
            (None, Some(n)) => {
                let line = match kind(&n.st) {
                    libc::S_IFLNK => format!("new symlink → {}", read_link(n)),
                    _ => format!("new {}", kind_name(&n.st)),
                };
                self.summary(rel, FileChange::Added, line);
            }
            (Some(o), None) => {
                let line = match kind(&o.st) {
                    libc::S_IFLNK => format!("deleted symlink (was → {})", read_link(o)),
                    _ => format!("deleted {}", kind_name(&o.st)),
                };
                self.summary(rel, FileChange::Deleted, line);
            }
            (Some(o), Some(n)) if kind(&o.st) == libc::S_IFLNK && kind(&n.st) == libc::S_IFLNK => {
                let (a, b) = (read_link(o), read_link(n));
                if a != b {
                    self.summary(
                        rel,
                        FileChange::Modified,
                        format!("symlink target {a} → {b}"),
                    );
                }
            }
            (Some(o), Some(n)) => {
                let describe = |a: &At<'_>| match kind(&a.st) {
                    libc::S_IFLNK => format!("symlink → {}", read_link(a)),
                    libc::S_IFREG => format!("file ({} bytes)", a.st.st_size),
                    _ => kind_name(&a.st).to_owned(),
                };
                self.summary(
                    rel,
                    FileChange::TypeChanged,
                    format!("type changed: {} → {}", describe(o), describe(n)),
                );
            }
        }
    }

    /// A whole subtree on one side only (added or deleted), or two full trees compared.
    fn tree(&mut self, rel: &Path, old: Option<At<'_>>, new: Option<At<'_>>) {
        if self.full() {
            return;
        }
        let od = old.filter(At::is_dir);
        let nd = new.filter(At::is_dir);
        match (od, nd) {
            (None, None) => self.leaf(rel, old, new),
            (Some(o), Some(n)) => {
                let (om, nm) = (o.st.st_mode & 0o7777, n.st.st_mode & 0o7777);
                if om != nm {
                    self.summary(
                        rel,
                        FileChange::ModeChanged,
                        format!("directory mode {om:o} → {nm:o}"),
                    );
                }
                self.children(rel, Some(o), Some(n));
            }
            (Some(o), None) => {
                self.children(rel, Some(o), None);
                if new.is_some() {
                    self.leaf(rel, None, new);
                }
            }
            (None, Some(n)) => {
                if old.is_some() {
                    self.leaf(rel, old, None);
                }
                self.children(rel, None, Some(n));
            }
        }
    }

    /// The union of two directories' entries, compared as full trees.
    fn children(&mut self, rel: &Path, old: Option<At<'_>>, new: Option<At<'_>>) {
        let open = |a: Option<At<'_>>| a.and_then(|a| open_dir_at(a.dir, a.name).ok());
        let (ofd, nfd) = (open(old), open(new));
        let mut all: Vec<OsString> = Vec::new();
        for fd in [&ofd, &nfd].into_iter().flatten() {
            all.extend(super::names(fd).unwrap_or_default());
        }
        all.sort();
        all.dedup();
        if all.is_empty() && new.is_some() && old.is_none() {
            self.summary(rel, FileChange::Added, "new empty directory".into());
        }
        for name in &all {
            if self.full() {
                return;
            }
            let o = ofd.as_ref().and_then(|d| At::lookup(d, name));
            let n = nfd.as_ref().and_then(|d| At::lookup(d, name));
            self.tree(&rel.join(name), o, n);
        }
    }

    /// An overlay upper dir merged with the host directory at the same place.
    fn overlay(&mut self, upper_root: &Path, rel: &Path, upper: &OwnedFd, host: Option<&OwnedFd>) {
        for name in super::names(upper).unwrap_or_default() {
            if self.full() {
                return;
            }
            let rel = rel.join(&name);
            let Some(u) = At::lookup(upper, &name) else {
                continue;
            };
            let h = host.and_then(|h| At::lookup(h, &name));
            match classify_upper(&upper_root.join(&rel), &u.st) {
                Upper::Whiteout => self.tree(&rel, h, None),
                Upper::Dir if h.as_ref().is_some_and(At::is_dir) => {
                    let h = h.expect("checked");
                    let (om, nm) = (h.st.st_mode & 0o7777, u.st.st_mode & 0o7777);
                    if om != nm {
                        self.summary(
                            &rel,
                            FileChange::ModeChanged,
                            format!("directory mode {om:o} → {nm:o}"),
                        );
                    }
                    let sub_u = open_dir_at(upper, &name);
                    let sub_h = open_dir_at(h.dir, h.name);
                    if let (Ok(su), Ok(sh)) = (sub_u, sub_h) {
                        self.overlay(upper_root, &rel, &su, Some(&sh));
                    }
                }
                // A new or opaque directory is a whole subtree; a file or symlink is a leaf.
                _ => self.tree(&rel, h, Some(u)),
            }
        }
    }

    fn finish(
        self,
        run_id: &str,
        workspace: PathBuf,
        source: DiffSource,
        mut notes: Vec<String>,
    ) -> RunDiff {
        if self.text_cut > 0 {
            notes.push(format!(
                "the diff text was cut at {} bytes: {} more file sections not shown (the file \
                 list and the stat are complete)",
                self.limits.max_output, self.text_cut
            ));
        }
        if self.walk_cut {
            notes.push(format!(
                "stopped after {} paths: the list and the stat are incomplete",
                self.limits.max_files
            ));
        }
        RunDiff {
            run_id: run_id.to_owned(),
            workspace,
            source,
            stat: self.stat,
            truncated: self.text_cut > 0 || self.walk_cut,
            complete: !self.walk_cut,
            files: self.files,
            text: self.text,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        }
    }
}

/// The diff of a kept (rolled-back) run: its upper dir against the workspace as it is now.
pub fn kept_diff(state_dir: &Path, run_id: &str, limits: DiffLimits) -> Result<RunDiff, DiffError> {
    let kept = load_kept(state_dir, run_id).map_err(|_| DiffError::NotFound(run_id.into()))?;
    let io = |e: Errno| DiffError::Io(run_id.into(), e.to_string());
    let upper_path = kept.upper();
    let upper = open_root(&upper_path).map_err(io)?;
    let host = open_root(kept.workspace()).map_err(io)?;
    let mut w = Writer::new(limits);
    w.overlay(&upper_path, Path::new(""), &upper, Some(&host));
    // The run's `write=` trees, shown under their absolute paths.
    for tree in &kept.meta.extra {
        let upper_path = tree.keep.join("upper");
        let (Ok(upper), Ok(host)) = (
            open_root(&upper_path),
            super::fsx::open_host_root(&tree.target),
        ) else {
            continue;
        };
        w.prefix = tree.target.clone();
        w.overlay(&upper_path, Path::new(""), &upper, Some(&host));
    }
    w.prefix = PathBuf::new();
    Ok(w.finish(
        run_id,
        kept.workspace().to_path_buf(),
        DiffSource::Kept,
        Vec::new(),
    ))
}

/// The diff of a committed run from its journal: each pre-image against the entry the commit
/// put in place (if it is still that entry).
pub fn journal_diff(
    state_dir: &Path,
    run_id: &str,
    limits: DiffLimits,
) -> Result<RunDiff, DiffError> {
    let view =
        journal::view(state_dir, run_id).ok_or_else(|| DiffError::NotFound(run_id.into()))?;
    let mut w = Writer::new(limits);
    if view.state == journal::JournalState::Undone {
        return Ok(w.finish(
            run_id,
            view.workspace,
            DiffSource::Undone,
            vec!["the run was undone: its pre-images are back and its changes are gone".into()],
        ));
    }
    let io = |e: Errno| DiffError::Io(run_id.into(), e.to_string());
    let ws = open_root(&view.workspace).map_err(io)?;
    let pre = open_root(&view.pre).map_err(io)?;
    journal_steps(&mut w, &ws, &pre, &view.steps);
    for tree in &view.extra {
        let (Ok(root), Ok(pre)) = (super::fsx::open_host_root(&tree.root), open_root(&tree.pre))
        else {
            continue;
        };
        w.prefix = tree.root.clone();
        journal_steps(&mut w, &root, &pre, &tree.steps);
    }
    w.prefix = PathBuf::new();
    Ok(w.finish(run_id, view.workspace, DiffSource::Journal, Vec::new()))
}

/// One tree's journalled steps: each pre-image against what the commit put in place.
fn journal_steps(w: &mut Writer, ws: &OwnedFd, pre: &OwnedFd, steps: &[journal::Step]) {
    for (n, step) in steps.iter().enumerate() {
        if w.full() {
            break;
        }
        let rel = &step.path;
        let (Some(name), parent) = (rel.file_name(), rel.parent().unwrap_or(Path::new(""))) else {
            continue;
        };
        let host = open_beneath(ws, parent).ok();
        let now = host.as_ref().and_then(|h| At::lookup(h, name));
        if let Some((old, new)) = step.mode {
            w.summary(
                rel,
                FileChange::ModeChanged,
                format!("directory mode {old:o} → {new:o}"),
            );
            continue;
        }
        let slot = OsString::from(n.to_string());
        let old = if step.old {
            At::lookup(pre, &slot)
        } else {
            None
        };
        let new = match (step.new, now) {
            (Some(ino), Some(at)) if at.st.st_ino == ino => Some(at),
            (Some(_), _) => {
                w.summary(
                    rel,
                    FileChange::ChangedSince,
                    "replaced or removed after the commit: no longer the run's (not shown)".into(),
                );
                continue;
            }
            (None, _) => None,
        };
        // `old` names its slot, not the path: compare under the path's name.
        w.tree(rel, old, new);
    }
}

/// The diff of run `run_id`: its kept upper dir if it has one (rolled back, not applied), else
/// its commit journal.
pub fn run_diff(state_dir: &Path, run_id: &str, limits: DiffLimits) -> Result<RunDiff, DiffError> {
    match kept_diff(state_dir, run_id, limits) {
        Err(DiffError::NotFound(_)) => journal_diff(state_dir, run_id, limits),
        other => other,
    }
}

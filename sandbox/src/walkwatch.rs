//! The secret walk kept valid by the kernel's notifications, for a mirror built ahead.
//!
//! A mirror built ahead (`helper::Whole`) mounted the masks of a secret walk made when it was
//! built. Until this watch, the walk was done again at `Run` to prove the masks still right —
//! the largest step left between the command's arrival and its start. Now the walk's reads are
//! recorded ([`Reads`]: each path it resolved, each directory it listed), and every directory
//! those reads depend on is watched with inotify ([`trace`]): each directory a path's
//! resolution looked a name up in (following links as the kernel does, so a link on the way
//! and the directory it leads to are both watched) and each directory listed. At `Run`
//! ([`Watch::changed`]) the walk is done again only if an event since then could have changed
//! its result; otherwise the masks mounted stand.
//!
//! Why that is enough. A walk's result is a function of the names in the directories it read
//! and of the mounts (the mount table is checked apart, `POLLPRI` on `mountinfo`): an entry's
//! type, a link's target and a directory's entries change only through a change of a name in
//! the directory holding it (create, delete, rename in or out — symbolic links cannot be
//! rewritten in place), which inotify reports on that directory before the system call that
//! made it returns. The builder watches, then walks again (the walk whose masks it mounts) and
//! keeps the watch only if that walk read nothing the watches do not cover ([`Reads::within`]):
//! every directory it read was watched before it read it, and the watch of each directory was
//! added before the trace looked a name up in it — so a change to any of them after it was read
//! is an event, and without one the walk at `Run` would read what the mounted walk read.
//!
//! What an event must name to matter ([`Filter`]): a directory a path was resolved through,
//! the names looked up there; the home directory's listing, the names the walk calls secret; a
//! workspace directory's listing (environment files at any depth), a secret name or any
//! directory (a new one may hold a `.env` later, and is not watched); any other listing
//! (a pattern's wildcard, a masked directory's placeholders), every name. An event without a
//! name (the directory itself deleted, moved, its attributes changed, unmounted), an event on
//! a watch not in the table, and a queue overflow always matter. So Claude Code's own writes
//! in the home directory (`~/.claude.json`) and an agent's edits in the workspace keep the
//! watch; a `.env` created anywhere in the workspace does not.
//!
//! Not used (the walk is done at `Run`, as before): a directory on a filesystem whose changes
//! inotify may not see (a network or FUSE filesystem, an overlay: changes made by another host
//! or through a lower layer are not reported; [`local_fs`]), more watches than the user may
//! have, a read the trace could not repeat.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What a listing's entries mean to the walk, and so which of their changes matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Listed {
    /// Every name (a wildcard's matches, a masked directory's placeholders, a mask split
    /// around the workspace).
    All,
    /// The home directory's entries: the names the walk calls secret.
    Home,
    /// A workspace directory's entries: secret (environment file) names, and directories.
    Env,
}

/// What one secret walk read on the host: each path it resolved (and whether the last
/// component's link was followed), each directory it listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    resolved: BTreeSet<(PathBuf, bool)>,
    listed: BTreeSet<(PathBuf, Listed)>,
}

impl Reads {
    /// `path` was resolved (`stat`, `canonicalize`, an open): links on the way followed, the
    /// last one too when `follow`.
    pub fn resolve(&mut self, path: &Path, follow: bool) {
        self.resolved.insert((path.to_path_buf(), follow));
    }

    /// The directory `path` (links followed) was listed.
    pub fn list(&mut self, path: &Path, kind: Listed) {
        self.listed.insert((path.to_path_buf(), kind));
    }

    /// Whether every read of `self` is one of `other`'s.
    pub fn within(&self, other: &Reads) -> bool {
        self.resolved.is_subset(&other.resolved) && self.listed.is_subset(&other.listed)
    }
}

/// Which events of one watched directory matter ([`Watch::changed`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Every name.
    pub all: bool,
    /// These names (looked up in the directory while a path was resolved).
    pub names: BTreeSet<Vec<u8>>,
    /// Any directory entry, and secret environment-file names ([`Listed::Env`]).
    pub env: bool,
    /// The home directory's secret names ([`Listed::Home`]).
    pub home: bool,
}

/// The events a watched directory reports: its names' changes, and its own end.
const EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// A new inotify instance (non-blocking), or `None` when the kernel gives none.
pub fn instance() -> Option<OwnedFd> {
    // SAFETY: no pointer is passed; a non-negative return is a new fd nothing else owns.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    // SAFETY: see above.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Filesystems whose every change to a name goes through this kernel's VFS, so inotify sees
/// it: the local disk filesystems and the kernel's memory ones. Not NFS, CIFS, FUSE (another
/// host or a daemon can change them), not overlayfs (a change made to a layer directly is not
/// reported on the overlay's inode).
fn local_fs(magic: i64) -> bool {
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    const TMPFS: i64 = 0x0102_1994;
    const F2FS: i64 = 0xF2F5_2010;
    const RAMFS: i64 = 0x8584_58f6;
    [EXT4, XFS, BTRFS, TMPFS, F2FS, RAMFS].contains(&magic)
}

/// Whether the directory `dir` looks names up without regard to case (`FS_CASEFOLD_FL`); a
/// directory whose flags cannot be read counts as one, unless its filesystem has no flags at
/// all (then it cannot fold case either). This kernel has no `CONFIG_UNICODE`: the `true` case
/// is not exercised by the tests here.
fn folds_case(dir: &Path) -> bool {
    const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
    const FS_CASEFOLD_FL: libc::c_long = 0x4000_0000;
    let Ok(fd) = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_RDONLY
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return true;
    };
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one `long` into `flags`, alive for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags) };
    if r < 0 {
        return !matches!(
            nix::errno::Errno::last(),
            nix::errno::Errno::ENOTTY | nix::errno::Errno::EOPNOTSUPP
        );
    }
    flags & FS_CASEFOLD_FL != 0
}

/// The most links a resolution follows (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

struct Tracer<'a> {
    fd: &'a OwnedFd,
    /// Watched directories (canonical) and their watch descriptors.
    wds: HashMap<PathBuf, i32>,
    filters: HashMap<i32, Filter>,
    /// Devices already found to be on a [`local_fs`].
    local: HashMap<u64, bool>,
    /// Watched directories looked names up in, and whether each folds case ([`folds_case`]).
    folds: HashMap<i32, bool>,
    /// Resolved directories: as spelled → canonical (`None`: missing or not a directory).
    dirs: HashMap<PathBuf, Option<PathBuf>>,
    links: u32,
    /// A watch could not be added, or a read failed otherwise than "not there".
    failed: bool,
}

/// Watch, in the inotify instance `fd`, every directory `reads` depend on (see the module
/// comment), each watch added before a name is looked up in its directory. The table of watch
/// descriptors and their filters, or `None` when some directory cannot be watched for all its
/// changes: the walk must be done again at `Run`.
pub fn trace(fd: &OwnedFd, reads: &Reads) -> Option<Vec<(i32, Filter)>> {
    let mut t = Tracer {
        fd,
        wds: HashMap::new(),
        filters: HashMap::new(),
        local: HashMap::new(),
        folds: HashMap::new(),
        dirs: HashMap::new(),
        links: 0,
        failed: false,
    };
    t.watch(Path::new("/"))?;
    for (path, follow) in &reads.resolved {
        t.links = 0;
        t.resolve(path, *follow);
    }
    for (path, kind) in &reads.listed {
        t.links = 0;
        if let Some((dir, true)) = t.resolve(path, true) {
            if let Some(wd) = t.watch(&dir) {
                let f = t.filters.entry(wd).or_default();
                match kind {
                    Listed::All => f.all = true,
                    Listed::Home => f.home = true,
                    Listed::Env => f.env = true,
                }
            }
        }
    }
    if t.failed {
        return None;
    }
    let mut table: Vec<(i32, Filter)> = t.filters.into_iter().collect();
    table.sort_by_key(|(wd, _)| *wd);
    Some(table)
}

impl Tracer<'_> {
    /// The watch of the directory `dir` (canonical), added now if it is not there yet.
    fn watch(&mut self, dir: &Path) -> Option<i32> {
        if let Some(wd) = self.wds.get(dir) {
            return Some(*wd);
        }
        let watched = self.add_watch(dir);
        if watched.is_none() {
            self.failed = true;
        }
        watched
    }

    fn add_watch(&mut self, dir: &Path) -> Option<i32> {
        let st = nix::sys::stat::lstat(dir).ok()?;
        let local = match self.local.get(&st.st_dev) {
            Some(local) => *local,
            None => {
                let fs = nix::sys::statfs::statfs(dir).ok()?;
                #[allow(clippy::unnecessary_cast)] // the type of f_type differs by libc
                let local = local_fs(fs.filesystem_type().0 as i64);
                self.local.insert(st.st_dev, local);
                local
            }
        };
        if !local {
            return None;
        }
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a NUL-ended path alive for the call; `fd` is an inotify instance.
        let wd = unsafe {
            libc::inotify_add_watch(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                EVENTS | libc::IN_ONLYDIR | libc::IN_DONT_FOLLOW,
            )
        };
        if wd < 0 {
            return None;
        }
        self.wds.insert(dir.to_path_buf(), wd);
        self.filters.entry(wd).or_default();
        Some(wd)
    }

    /// `name` was looked up in the directory `dir` (canonical): watched, the name recorded —
    /// or every name, in a directory that folds case (ext4's and f2fs's `+F`): there a lookup
    /// of `.ssh` finds `.SSH`, whose creation an event names as such.
    fn looked_up(&mut self, dir: &Path, name: &OsStr) -> Option<()> {
        let wd = self.watch(dir)?;
        let folds = *self.folds.entry(wd).or_insert_with(|| folds_case(dir));
        let f = self.filters.entry(wd).or_default();
        f.all |= folds;
        f.names.insert(name.as_bytes().to_vec());
        Some(())
    }

    /// The directory `path` resolves to (canonical), once per spelling.
    fn dir(&mut self, path: &Path) -> Option<PathBuf> {
        if let Some(known) = self.dirs.get(path) {
            return known.clone();
        }
        let found = match self.resolve(path, true) {
            Some((dir, true)) => Some(dir),
            _ => None,
        };
        self.dirs.insert(path.to_path_buf(), found.clone());
        found
    }

    /// Resolve the absolute `path` as the kernel would, watching each directory before a name
    /// is looked up in it: the canonical path and whether it is a directory, or `None` when it
    /// does not resolve (missing, a file on the way, too many links).
    fn resolve(&mut self, path: &Path, follow: bool) -> Option<(PathBuf, bool)> {
        let comps: Vec<Component> = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        if comps.first() != Some(&Component::RootDir) {
            // The walk resolves absolute paths only: a relative one is not traced.
            self.failed = true;
            return None;
        }
        // `a/link/../b`: `..` goes up from where the link led, not from `a`.
        if let Some(i) = comps.iter().position(|c| matches!(c, Component::ParentDir)) {
            let before: PathBuf = comps[..i].iter().collect();
            let dir = self.dir(&before)?;
            let mut rest = dir.parent().unwrap_or(Path::new("/")).to_path_buf();
            rest.extend(&comps[i + 1..]);
            return self.resolve(&rest, follow);
        }
        let Some(name) = path.file_name() else {
            return Some((PathBuf::from("/"), true));
        };
        let parent = path.parent().unwrap_or(Path::new("/"));
        let dir = self.dir(parent)?;
        self.looked_up(&dir, name)?;
        let next = dir.join(name);
        let st = match nix::sys::stat::lstat(&next) {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => return None,
            Err(_) => {
                self.failed = true;
                return None;
            }
        };
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK && follow {
            self.links += 1;
            if self.links > MAX_LINKS {
                return None;
            }
            let Ok(target) = std::fs::read_link(&next) else {
                self.failed = true;
                return None;
            };
            return self.resolve(&dir.join(target), true);
        }
        Some((next, kind == libc::S_IFDIR))
    }
}

/// A mirror's secret walk kept valid: the inotify instance its directories are watched in,
/// and what each watch's events must name to matter.
pub struct Watch {
    fd: OwnedFd,
    filters: HashMap<i32, Filter>,
}

impl Watch {
    pub fn new(fd: OwnedFd, table: Vec<(i32, Filter)>) -> Watch {
        Watch {
            fd,
            filters: table.into_iter().collect(),
        }
    }

    /// Whether an event since the watches were added could have changed the walk's result
    /// (see the module comment): `home` and `extra` are the run's, for the secret names.
    /// Reads every pending event; an error reading them counts as a change.
    pub fn changed(&self, home: Option<&Path>, extra: &[String]) -> bool {
        let mut names: Option<crate::secrets::Names> = None;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is writable for its length for the call; `fd` is ours.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                return nix::errno::Errno::last() != nix::errno::Errno::EAGAIN;
            }
            if n == 0 {
                return true;
            }
            let filled = &buf[..n as usize];
            // `struct inotify_event`: wd i32, mask u32, cookie u32, len u32, name[len].
            const HEAD: usize = 16;
            let mut at = 0;
            while at + HEAD <= filled.len() {
                let word = |o: usize| {
                    u32::from_ne_bytes([
                        filled[at + o],
                        filled[at + o + 1],
                        filled[at + o + 2],
                        filled[at + o + 3],
                    ])
                };
                let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
                let end = at + HEAD + len;
                if end > filled.len() {
                    return true; // the kernel never writes a record like that
                }
                let raw = &filled[at + HEAD..end];
                let name = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
                at = end;
                let names = names.get_or_insert_with(|| crate::secrets::Names::new(home, extra));
                if self.matters(wd, mask, name, names) {
                    return true;
                }
            }
        }
    }

    fn matters(&self, wd: i32, mask: u32, name: &[u8], names: &crate::secrets::Names) -> bool {
        const ALWAYS: u32 = libc::IN_Q_OVERFLOW
            | libc::IN_IGNORED
            | libc::IN_UNMOUNT
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF;
        let Some(f) = self.filters.get(&wd) else {
            return true;
        };
        if mask & ALWAYS != 0 || name.is_empty() || f.all || f.names.contains(name) {
            return true;
        }
        let text = String::from_utf8_lossy(name);
        (f.env && (mask & libc::IN_ISDIR != 0 || names.env_secret(&text)))
            || (f.home && names.home_secret(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(resolved: &[(&Path, bool)], listed: &[(&Path, Listed)]) -> Reads {
        let mut r = Reads::default();
        for (p, f) in resolved {
            r.resolve(p, *f);
        }
        for (p, k) in listed {
            r.list(p, *k);
        }
        r
    }

    fn watched(r: &Reads) -> Watch {
        let fd = instance().expect("inotify");
        let table = trace(&fd, r).expect("traced");
        Watch::new(fd, table)
    }

    /// A change to a name looked up on the way to a path matters, through a link too; a change
    /// to another name in the same directories does not.
    #[test]
    fn a_resolved_paths_names_matter_through_links_and_no_other_names() {
        let tmp = tempfile::tempdir().expect("tmp");
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("real/keys")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let r = reads(&[(&base.join("link/keys/token"), true)], &[]);

        let w = watched(&r);
        std::fs::write(base.join("real/other.txt"), "x").unwrap();
        std::fs::write(base.join("real/keys/notes"), "x").unwrap();
        std::fs::write(base.join("unrelated"), "x").unwrap();
        assert!(!w.changed(None, &[]), "an unrelated name mattered");
        std::fs::write(base.join("real/keys/token"), "SECRET").unwrap();
        assert!(
            w.changed(None, &[]),
            "the looked-up name was created unseen"
        );

        // The link re-pointed: its name in the directory holding it.
        let w = watched(&r);
        std::fs::create_dir_all(base.join("real2/keys")).unwrap();
        std::fs::remove_file(base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("real2"), base.join("link")).unwrap();
        assert!(w.changed(None, &[]), "the link's change was unseen");

        // A directory on the way renamed away.
        let r = reads(&[(&base.join("real/keys/token"), false)], &[]);
        let w = watched(&r);
        std::fs::rename(base.join("real/keys"), base.join("real/keys-old")).unwrap();
        assert!(w.changed(None, &[]), "the rename was unseen");
    }

    /// A workspace directory's listing: a secret name or a new directory matters, an edited or
    /// new ordinary file does not; any other listing: every name.
    #[test]
    fn a_listings_kind_decides_which_names_matter() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/main.rs"), "fn main() {}").unwrap();
        let r = reads(&[], &[(&ws, Listed::Env), (&ws.join("src"), Listed::Env)]);

        let w = watched(&r);
        std::fs::write(ws.join("src/main.rs"), "fn main() { }").unwrap();
        std::fs::write(ws.join("src/lib.rs"), "").unwrap();
        std::fs::rename(ws.join("src/lib.rs"), ws.join("src/lib2.rs")).unwrap();
        assert!(!w.changed(None, &[]), "an ordinary file mattered");
        std::fs::write(ws.join("src/.env"), "TOKEN=x").unwrap();
        assert!(w.changed(None, &[]), "a new .env was unseen");

        let w = watched(&r);
        std::fs::create_dir(ws.join("src/deeper")).unwrap();
        assert!(w.changed(None, &[]), "a new directory was unseen");

        let w = watched(&r);
        std::fs::write(ws.join("x.tmp"), "").unwrap();
        std::fs::rename(ws.join("x.tmp"), ws.join(".envrc")).unwrap();
        assert!(
            w.changed(None, &[]),
            "a file renamed to a secret name was unseen"
        );

        // The operator's own name pattern.
        let w = watched(&r);
        std::fs::write(ws.join("deploy.key"), "").unwrap();
        assert!(
            w.changed(None, &["*.key".to_string()]),
            "an operator's pattern was unseen"
        );

        let r = reads(&[], &[(&ws, Listed::All)]);
        let w = watched(&r);
        std::fs::write(ws.join("plain.txt"), "").unwrap();
        assert!(w.changed(None, &[]), "a name of a whole listing was unseen");
    }

    /// The home directory's listing: its secret names matter, Claude Code's own state file
    /// does not.
    #[test]
    fn the_homes_secret_names_matter() {
        let tmp = tempfile::tempdir().expect("tmp");
        let home = tmp.path().canonicalize().unwrap();
        let r = reads(&[], &[(&home, Listed::Home)]);
        let w = watched(&r);
        std::fs::write(home.join(".claude.json.tmp"), "{}").unwrap();
        std::fs::rename(home.join(".claude.json.tmp"), home.join(".claude.json")).unwrap();
        assert!(!w.changed(Some(&home), &[]), "an ordinary file mattered");
        std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
        assert!(w.changed(Some(&home), &[]), "a new ~/.netrc was unseen");
    }

    /// A directory on a filesystem inotify may not see every change of is not watched, and a
    /// watched directory's own removal matters.
    #[test]
    fn only_local_filesystems_are_watched_and_a_watched_dirs_end_matters() {
        assert!(!local_fs(0x6969), "NFS counted as local");
        assert!(!local_fs(0x65735546), "FUSE counted as local");
        assert!(!local_fs(0x794c_7630), "overlayfs counted as local");
        let fd = instance().expect("inotify");
        let r = reads(&[(Path::new("/proc/self/status"), true)], &[]);
        assert!(trace(&fd, &r).is_none(), "/proc was watched");

        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path().canonicalize().unwrap().join("d");
        std::fs::create_dir(&d).unwrap();
        let r = reads(&[], &[(&d, Listed::Env)]);
        let w = watched(&r);
        std::fs::remove_dir(&d).unwrap();
        assert!(w.changed(None, &[]), "the directory's removal was unseen");
    }
}

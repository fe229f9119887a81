//! The secret walk kept valid by the kernel's notifications, for a mirror built ahead.
//!
//! A mirror built ahead (`helper::Whole`) mounted the masks of a secret walk made when it was
//! built. Until this watch, the walk was done again at `Run` to prove the masks still right —
//! the largest step left between the command's arrival and its start, and one that grows with
//! the workspace (a listing per directory). Now the builder's walk, the one whose masks it
//! mounts, watches as it goes ([`Tracer`]): right before each read of the host — a path
//! resolved, a directory listed — every directory that read depends on is watched with
//! inotify: each directory a resolution looks a name up in (following links as the kernel does,
//! so a link on the way and the directory it leads to are both watched), and the directory
//! listed. At `Run` ([`Watch::changed`]) the walk is done again only if an event since then
//! could have changed its result; otherwise the masks mounted stand.
//!
//! Why that is enough. A walk's result is a function of the names in the directories it read
//! and of the mounts (the mount table is checked apart, `POLLPRI` on `mountinfo`): an entry's
//! type, a link's target and a directory's entries change only through a change of a name in
//! the directory holding it (create, delete, rename in or out — symbolic links cannot be
//! rewritten in place), which inotify reports on that directory before the system call that
//! made it returns. Each watch is added before the read it covers, and each directory's watch
//! before a name is looked up in it: the first directory of every resolution is `/`, and the
//! next one is the one a watched lookup found — if that lookup's answer changed after the watch,
//! that is an event; if not, it is the directory the walk reads next. So a change to anything
//! the walk read, after it read it, is an event; without one, a walk at `Run` would read what
//! the mounted walk read.
//!
//! What an event must name to matter ([`Filter`]): a directory a path was resolved through,
//! the names looked up there, in any case (a directory may fold case: `+F`, set on an empty
//! directory without an event), and any name outside ASCII (Unicode folding maps some onto
//! ASCII ones); the home directory's listing, the names the walk calls secret; a workspace
//! directory's listing (environment files at any depth), a secret name or any directory (a new
//! one may hold a `.env` later, and is not watched); any other listing (a pattern's wildcard, a
//! masked directory's placeholders), every name. An event without a name (the directory itself
//! deleted, moved, its attributes changed, unmounted), an event on a watch not in the table,
//! and a queue overflow always matter. So an agent's edits in the workspace and a new ordinary
//! file in the home keep the watch; a `.env` created anywhere in the workspace does not, and
//! neither does a file the table names in the home (Claude Code's own `~/.claude.json`, which it
//! replaces by a rename: a mirror built ahead is then not used anyway, as the path of each of
//! its masks must still be the same file at `Run`).
//!
//! Not used (the walk is done at `Run`, as before): a directory on a filesystem whose changes
//! inotify may not see (a network or FUSE filesystem, an overlay: changes made by another host
//! or through a lower layer are not reported; [`local_fs`]); an encrypted (fscrypt) directory,
//! whose names change without an event when its key is added or removed; more than
//! [`MAX_WATCHES`] directories, or more watches than the user may have; a path that fails to
//! resolve for another reason than its absence.

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

/// The most watches one walk adds: past it the walk is not watched (redone at `Run`), so a
/// workspace of a hundred thousand directories cannot use up the inotify watches of the
/// helper's user (root's, shared with the host's services).
const MAX_WATCHES: usize = 16_384;

/// `statx`'s `STATX_ATTR_ENCRYPTED`: an fscrypt directory, whose names change without an event
/// when its key is added or removed.
const ATTR_ENCRYPTED: u64 = 0x800;

/// Whether `dir` is a directory of a [`local_fs`] that is not encrypted: one whose dentries
/// an overlay keeps as it looked them up (no revalidation by the filesystem).
pub fn plain_local_dir(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero `statx` is a valid value to be overwritten.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-ended path and `stx` writable, both alive for the call.
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_TYPE, &mut stx) };
    if r < 0
        || u32::from(stx.stx_mode) & libc::S_IFMT != libc::S_IFDIR
        || stx.stx_attributes & ATTR_ENCRYPTED != 0
    {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // the type of f_type differs by libc
    nix::sys::statfs::statfs(dir).is_ok_and(|fs| local_fs(fs.filesystem_type().0 as i64))
}

/// The most links a resolution follows (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// The watches of one secret walk, added as it goes: the walk calls [`Tracer::resolve`] or
/// [`Tracer::list`] right before each read of the host, which watches every directory that read
/// depends on before the read is made (see the module comment).
pub struct Tracer {
    fd: OwnedFd,
    /// Watched directories (canonical) and their watch descriptors.
    wds: HashMap<PathBuf, i32>,
    filters: HashMap<i32, Filter>,
    /// Devices already found to be on a [`local_fs`].
    local: HashMap<u64, bool>,
    /// Resolved directories: as spelled → canonical (`None`: missing or not a directory).
    dirs: HashMap<PathBuf, Option<PathBuf>>,
    links: u32,
    /// A watch could not be added, or a read failed otherwise than "not there".
    failed: bool,
}

impl Tracer {
    /// Watches to be added to the inotify instance `fd` (a copy of the helper's).
    pub fn new(fd: OwnedFd) -> Tracer {
        Tracer {
            fd,
            wds: HashMap::new(),
            filters: HashMap::new(),
            local: HashMap::new(),
            dirs: HashMap::new(),
            links: 0,
            failed: false,
        }
    }

    /// `path` is about to be resolved (`stat`, `canonicalize`, an open): links on the way
    /// followed, the last one too when `follow`. Each directory a name is looked up in on the
    /// way is watched, with that name.
    pub fn resolve(&mut self, path: &Path, follow: bool) {
        if self.failed {
            return;
        }
        self.links = 0;
        self.resolve_at(path, follow);
    }

    /// The directory `path` (links followed) is about to be listed: resolved as above, and
    /// watched for the names a listing of this `kind` cares about.
    pub fn list(&mut self, path: &Path, kind: Listed) {
        if self.failed {
            return;
        }
        self.links = 0;
        if let Some((dir, true)) = self.resolve_at(path, true) {
            if let Some(wd) = self.watch(&dir) {
                let f = self.filters.entry(wd).or_default();
                match kind {
                    Listed::All => f.all = true,
                    Listed::Home => f.home = true,
                    Listed::Env => f.env = true,
                }
            }
        }
    }

    /// The table of watch descriptors and their filters, or `None` when some directory could
    /// not be watched for all its changes (the walk must be done again at `Run`).
    pub fn finish(self) -> Option<Vec<(i32, Filter)>> {
        if self.failed {
            return None;
        }
        let mut table: Vec<(i32, Filter)> = self.filters.into_iter().collect();
        table.sort_by_key(|(wd, _)| *wd);
        Some(table)
    }

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
        if self.failed || self.wds.len() >= MAX_WATCHES {
            return None;
        }
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: an all-zero `statx` is a valid value to be overwritten.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-ended path and `stx` writable, both alive for the call.
        let r = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                c.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
                libc::STATX_TYPE,
                &mut stx,
            )
        };
        if r < 0 || stx.stx_attributes & ATTR_ENCRYPTED != 0 {
            return None;
        }
        let dev = libc::makedev(stx.stx_dev_major, stx.stx_dev_minor);
        let local = match self.local.get(&dev) {
            Some(local) => *local,
            None => {
                let fs = nix::sys::statfs::statfs(dir).ok()?;
                #[allow(clippy::unnecessary_cast)] // the type of f_type differs by libc
                let local = local_fs(fs.filesystem_type().0 as i64);
                self.local.insert(dev, local);
                local
            }
        };
        if !local {
            return None;
        }
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

    /// `name` was looked up in the directory `dir` (canonical): watched, the name recorded
    /// (an event matches it without regard to case, see [`Watch::matters`]).
    fn looked_up(&mut self, dir: &Path, name: &OsStr) -> Option<()> {
        let wd = self.watch(dir)?;
        self.filters
            .entry(wd)
            .or_default()
            .names
            .insert(name.as_bytes().to_vec());
        Some(())
    }

    /// The directory `path` resolves to (canonical), once per spelling.
    fn dir(&mut self, path: &Path) -> Option<PathBuf> {
        if let Some(known) = self.dirs.get(path) {
            return known.clone();
        }
        let found = match self.resolve_at(path, true) {
            Some((dir, true)) => Some(dir),
            _ => None,
        };
        self.dirs.insert(path.to_path_buf(), found.clone());
        found
    }

    /// Resolve the absolute `path` as the kernel would, watching each directory before a name
    /// is looked up in it: the canonical path and whether it is a directory, or `None` when it
    /// does not resolve (missing, a file on the way, too many links).
    fn resolve_at(&mut self, path: &Path, follow: bool) -> Option<(PathBuf, bool)> {
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
            return self.resolve_at(&rest, follow);
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
            return self.resolve_at(&dir.join(target), true);
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
        if mask & ALWAYS != 0 || name.is_empty() || f.all {
            return true;
        }
        // A looked-up name, in any case: a directory may fold case (ext4's and f2fs's `+F`,
        // which can be set on an empty directory without an event), and then a lookup of
        // `.ssh` finds `.SSH`. Unicode folding can map a name outside ASCII onto an ASCII one
        // (the Kelvin sign onto `k`): any such name counts where names were looked up.
        if !f.names.is_empty()
            && (!name.is_ascii() || f.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        {
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

    /// A walk's watches for these reads, in the order a walk would make them.
    fn watched(resolved: &[(&Path, bool)], listed: &[(&Path, Listed)]) -> Option<Watch> {
        let fd = instance().expect("inotify");
        let mut t = Tracer::new(fd.try_clone().expect("dup"));
        for (p, f) in resolved {
            t.resolve(p, *f);
        }
        for (p, k) in listed {
            t.list(p, *k);
        }
        t.finish().map(|table| Watch::new(fd, table))
    }

    /// A change to a name looked up on the way to a path matters, through a link too; a change
    /// to another name in the same directories does not.
    #[test]
    fn a_resolved_paths_names_matter_through_links_and_no_other_names() {
        let tmp = tempfile::tempdir().expect("tmp");
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("real/keys")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let token = base.join("link/keys/token");
        let resolved = [(token.as_path(), true)];

        let w = watched(&resolved, &[]).expect("watched");
        std::fs::write(base.join("real/other.txt"), "x").unwrap();
        std::fs::write(base.join("real/keys/notes"), "x").unwrap();
        std::fs::write(base.join("unrelated"), "x").unwrap();
        assert!(!w.changed(None, &[]), "an unrelated name mattered");
        std::fs::write(base.join("real/keys/token"), "SECRET").unwrap();
        assert!(
            w.changed(None, &[]),
            "the looked-up name was created unseen"
        );

        // In another case (a directory that folds case finds it by the looked-up name), or
        // outside ASCII (Unicode folding can map it onto the looked-up name).
        let w = watched(&resolved, &[]).expect("watched");
        std::fs::write(base.join("real/keys/TOKEN"), "SECRET").unwrap();
        assert!(w.changed(None, &[]), "the name in another case was unseen");
        let w = watched(&resolved, &[]).expect("watched");
        std::fs::write(base.join("real/keys/to\u{212a}en"), "SECRET").unwrap();
        assert!(w.changed(None, &[]), "a name outside ASCII was unseen");

        // The link re-pointed: its name in the directory holding it.
        let w = watched(&resolved, &[]).expect("watched");
        std::fs::create_dir_all(base.join("real2/keys")).unwrap();
        std::fs::remove_file(base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("real2"), base.join("link")).unwrap();
        assert!(w.changed(None, &[]), "the link's change was unseen");

        // A directory on the way renamed away.
        let real = base.join("real/keys/token");
        let w = watched(&[(real.as_path(), false)], &[]).expect("watched");
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
        let src = ws.join("src");
        let listed = [(ws.as_path(), Listed::Env), (src.as_path(), Listed::Env)];

        let w = watched(&[], &listed).expect("watched");
        std::fs::write(ws.join("src/main.rs"), "fn main() { }").unwrap();
        std::fs::write(ws.join("src/lib.rs"), "").unwrap();
        std::fs::rename(ws.join("src/lib.rs"), ws.join("src/lib2.rs")).unwrap();
        assert!(!w.changed(None, &[]), "an ordinary file mattered");
        std::fs::write(ws.join("src/.env"), "TOKEN=x").unwrap();
        assert!(w.changed(None, &[]), "a new .env was unseen");

        let w = watched(&[], &listed).expect("watched");
        std::fs::create_dir(ws.join("src/deeper")).unwrap();
        assert!(w.changed(None, &[]), "a new directory was unseen");

        let w = watched(&[], &listed).expect("watched");
        std::fs::write(ws.join("x.tmp"), "").unwrap();
        std::fs::rename(ws.join("x.tmp"), ws.join(".envrc")).unwrap();
        assert!(
            w.changed(None, &[]),
            "a file renamed to a secret name was unseen"
        );

        // The operator's own name pattern.
        let w = watched(&[], &listed).expect("watched");
        std::fs::write(ws.join("deploy.key"), "").unwrap();
        assert!(
            w.changed(None, &["*.key".to_string()]),
            "an operator's pattern was unseen"
        );

        let w = watched(&[], &[(ws.as_path(), Listed::All)]).expect("watched");
        std::fs::write(ws.join("plain.txt"), "").unwrap();
        assert!(w.changed(None, &[]), "a name of a whole listing was unseen");
    }

    /// The home directory's listing: its secret names matter, an ordinary file written by a
    /// rename does not.
    #[test]
    fn the_homes_secret_names_matter() {
        let tmp = tempfile::tempdir().expect("tmp");
        let home = tmp.path().canonicalize().unwrap();
        let w = watched(&[], &[(home.as_path(), Listed::Home)]).expect("watched");
        std::fs::write(home.join(".notes.tmp"), "{}").unwrap();
        std::fs::rename(home.join(".notes.tmp"), home.join(".notes")).unwrap();
        assert!(!w.changed(Some(&home), &[]), "an ordinary file mattered");
        std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
        assert!(w.changed(Some(&home), &[]), "a new ~/.netrc was unseen");
    }

    /// An encrypted (fscrypt) directory is not watched: adding or removing its key changes the
    /// names it lists without an event. (An ext4 image with the `encrypt` feature on a loop
    /// device, a v2 policy with a key added to the filesystem; root and `mkfs.ext4` needed, as
    /// in CI.)
    #[test]
    fn an_encrypted_directory_is_not_watched() {
        struct Mounted(PathBuf);
        impl Drop for Mounted {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let tmp = tempfile::tempdir_in("/var/tmp").expect("tmp");
        let (img, mnt) = (tmp.path().join("enc.img"), tmp.path().join("mnt"));
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(32 << 20))
            .expect("image");
        let ok = |cmd: &mut std::process::Command| {
            let out = cmd.output().expect("run");
            assert!(out.status.success(), "{cmd:?}: {out:?}");
        };
        ok(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-O", "encrypt"])
            .arg(&img));
        std::fs::create_dir(&mnt).expect("mkdir");
        ok(std::process::Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt));
        let _mounted = Mounted(mnt.clone());
        // FS_IOC_ADD_ENCRYPTION_KEY: a key by identifier (spec type 2), 64 raw bytes.
        let mut arg = vec![0u8; 80 + 64];
        arg[0..4].copy_from_slice(&2u32.to_ne_bytes());
        arg[40..44].copy_from_slice(&64u32.to_ne_bytes());
        for (i, b) in arg[80..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let root = std::fs::File::open(&mnt).expect("open the mount");
        // SAFETY: the argument is the kernel's `fscrypt_add_key_arg` with its key, alive and
        // writable for the call (the identifier comes back in it).
        let r = unsafe { libc::ioctl(root.as_raw_fd(), 0xC050_6617u32 as _, arg.as_mut_ptr()) };
        assert_eq!(r, 0, "add key: {}", std::io::Error::last_os_error());
        let vault = mnt.join("vault");
        std::fs::create_dir(&vault).expect("mkdir vault");
        // A v2 policy: AES-256-XTS contents, AES-256-CTS names, the key's identifier.
        let mut policy = [0u8; 24];
        policy[..3].copy_from_slice(&[2, 1, 4]);
        policy[8..24].copy_from_slice(&arg[8..24]);
        let dir = std::fs::File::open(&vault).expect("open vault");
        // SAFETY: the argument is a `fscrypt_policy_v2`, alive for the call.
        let r = unsafe { libc::ioctl(dir.as_raw_fd(), 0x800C_6613u32 as _, policy.as_ptr()) };
        assert_eq!(r, 0, "set policy: {}", std::io::Error::last_os_error());
        let plain = mnt.join("plain");
        std::fs::create_dir(&plain).expect("mkdir plain");
        assert!(
            watched(&[], &[(plain.as_path(), Listed::Env)]).is_some(),
            "a plain directory on the same filesystem was not watched"
        );
        assert!(
            watched(&[], &[(vault.as_path(), Listed::Env)]).is_none(),
            "the encrypted directory was watched"
        );
        assert!(
            watched(&[(vault.join(".env").as_path(), true)], &[]).is_none(),
            "a lookup in the encrypted directory was watched"
        );
    }

    /// A walk of more than `MAX_WATCHES` directories is not watched (the watches of the
    /// helper's user are shared with the host's services); one of that many is.
    #[test]
    fn a_walk_of_too_many_directories_is_not_watched() {
        let tmp = tempfile::tempdir().expect("tmp");
        let base = tmp.path().canonicalize().unwrap();
        // The directories above `base` take watches too: `/`, and each one on the way.
        let above = base.components().count();
        let dirs: Vec<PathBuf> = (0..MAX_WATCHES + 1 - above)
            .map(|i| base.join(format!("d{}/e{}", i / 100, i % 100)))
            .collect();
        for d in &dirs {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let listed: Vec<(&Path, Listed)> =
            dirs.iter().map(|d| (d.as_path(), Listed::Env)).collect();
        assert!(
            watched(&[], &listed).is_none(),
            "{} directories were watched",
            listed.len()
        );
        assert!(
            watched(&[], &listed[..listed.len() / 2]).is_some(),
            "half as many were not watched"
        );
    }

    /// A directory on a filesystem inotify may not see every change of is not watched, and a
    /// watched directory's own removal matters.
    #[test]
    fn only_local_filesystems_are_watched_and_a_watched_dirs_end_matters() {
        assert!(!local_fs(0x6969), "NFS counted as local");
        assert!(!local_fs(0x65735546), "FUSE counted as local");
        assert!(!local_fs(0x794c_7630), "overlayfs counted as local");
        assert!(
            watched(&[(Path::new("/proc/self/status"), true)], &[]).is_none(),
            "/proc was watched"
        );

        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path().canonicalize().unwrap().join("d");
        std::fs::create_dir(&d).unwrap();
        let w = watched(&[], &[(d.as_path(), Listed::Env)]).expect("watched");
        std::fs::remove_dir(&d).unwrap();
        assert!(w.changed(None, &[]), "the directory's removal was unseen");
    }
}

//! `lstat` answers kept across decisions, each dropped the moment the kernel reports a change it
//! depends on. A routed decision resolves ~50 distinct paths (cmdgate's own files and their
//! directories, git's repository walk up to `/`, the project, the words); asked fresh for every
//! decision they were a fifth of its cost (docs/benchmarks.md, issue 12, session 8). Kept here, a
//! decision whose paths did not change asks the kernel only "did anything change?": one
//! non-blocking read of an inotify descriptor and one `poll` of the mount table.
//!
//! The promise is the per-judgement memo's (`memo.rs`): every answer is what a fresh `lstat`
//! would give for every change that finished before the decision started (`drain`, called by
//! `Memo::over` before the judgement's first lookup). How it is kept:
//!
//! - **Which fields.** The walk (`kernel::walk`, hook/src/kernel.rs) reads four fields of an
//!   `lstat`: the file type, `st_nlink`, `st_dev`, `st_ino`. Those are the kept answer (the
//!   `Metadata`'s times and size may be older; nothing reads them). Errors: only "not found"
//!   (`ENOENT`) and "name too long" (a property of the name) are kept; every other error is
//!   asked again (`EACCES` may come from a security module's policy, `EIO` from a device).
//! - **Watches before answers.** A key `dir/name` is kept only while `dir` is registered: a kept
//!   directory key with its own inotify watch (`IN_CREATE`, `IN_DELETE`, `IN_MOVED_FROM`,
//!   `IN_MOVED_TO`, `IN_ATTRIB`, `IN_DELETE_SELF`, `IN_MOVE_SELF`; `IN_ONLYDIR`,
//!   `IN_DONT_FOLLOW`). So every directory from `/` to the key is watched, and every change of
//!   an entry on the path (create, unlink, rename over, a link swapped in) or of an ancestor's
//!   attributes (its mode: search permission) is reported to a watch. Every key that exists
//!   (a directory, file, symbolic link, device, fifo or socket) gets its own watch *before* the
//!   `lstat` that is kept (`lstat`, watch, `lstat` again: the first only says which kind of
//!   watch): a directory's `st_nlink` changes with its subdirectories (reported only to its own
//!   watch), and any other inode's with a hard link made or removed in ANOTHER directory (the
//!   kernel's `fsnotify_link_count`: `IN_ATTRIB` to the inode's own watches only). A link's
//!   target is read fresh (`read_link`) and cannot change without replacing the link (an event
//!   in `dir`). A missing name needs no watch but `dir`'s.
//! - **Events drop.** A child event (`dir`'s watch, a name) drops `dir/name` and every key below
//!   it, and `dir`'s own answer when the child is a directory (its link count); an event on the
//!   watched inode itself (`IN_ATTRIB`, `IN_DELETE_SELF`, `IN_MOVE_SELF`, `IN_UNMOUNT`,
//!   `IN_IGNORED`) drops the key and everything below it; `IN_Q_OVERFLOW` (events were lost)
//!   drops everything and starts a new inotify descriptor. The kernel queues an event inside
//!   the syscall that makes the change, before it returns, so a change finished before a drain
//!   is in the queue the drain reads.
//! - **Mounts.** inotify does not report mount or umount. `/proc/thread-self/mountinfo` is kept
//!   open and polled (timeout 0) at each drain: `POLLPRI`/`POLLERR` (the namespace's mount
//!   table changed since the last poll) drops everything.
//! - **Only local file systems.** inotify sees the changes made through this kernel. On NFS,
//!   CIFS, 9p, virtiofs, FUSE, overlayfs (its lower layers), ... a change made elsewhere is not
//!   reported, so a directory is registered only when `statfs` says ext2/3/4, xfs, btrfs, tmpfs
//!   or f2fs ([`local`]): whenever a directory's `st_dev` differs from its parent's (a mount
//!   point, a btrfs subvolume) or it is `/`; a same-`st_dev` directory is on its parent's
//!   superblock. A non-directory whose `st_dev` is not its directory's (a file mounted over a
//!   file) is not kept. Below anything else, every lookup is fresh, as before.
//! - **Races.** A lookup asks the kernel outside the lock (a hung lookup on a remote file
//!   system must not stop every other decision) and keeps its answer only if no drain read an
//!   event in between (`epoch`): an event drained before the answer is stored could be the very
//!   change it missed. A change racing a decision is what it was with a fresh memo: the
//!   judgement may see either state, and the next decision sees the last.
//! - **Bounds.** At most [`MAX_KEYS`] answers and [`MAX_WATCHES`] watches; at a bound nothing
//!   more is kept until the next drain, which starts over empty (a new inotify descriptor, so
//!   every watch goes with the old one). A watch the kernel refuses (`ENOSPC`: the user's
//!   `max_user_watches`; any error) keeps nothing for that path: a fresh answer, never an
//!   error. No inotify descriptor or mount table: nothing is kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use nix::sys::statfs;

use super::memo::Kept;

/// Answers kept at most; at the bound nothing more is kept until the next drain starts over.
pub(crate) const MAX_KEYS: usize = 4096;
/// Watches held at most (one per kept directory and file).
pub(crate) const MAX_WATCHES: usize = 1024;
/// Events one drain handles one by one; more and it starts over (a build in a watched
/// directory can queue thousands).
const MAX_EVENTS: usize = 1024;

/// A directory's watch: every change of an entry, and of the directory itself.
fn dir_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// Any other inode's watch: its attributes (mode, owner, link count) and its going away. Not
/// `IN_MODIFY`: the daemon's own store writes would drop its answers at every decision, and
/// neither size nor times are read.
fn file_mask() -> AddWatchFlags {
    AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// File systems whose every change goes through this kernel's VFS, which reports it to inotify:
/// block-device file systems mounted by this kernel only (ext2/3/4 share one magic, xfs, f2fs,
/// btrfs — whose subvolume ioctls notify as `mkdir`/`rmdir` do, `fsnotify_mkdir` on create and
/// `fsnotify_rmdir` on destroy since Linux 5.3) and memory (tmpfs). Not NFS, CIFS, 9p, virtiofs, FUSE, ceph (changed by other hosts or
/// a server process the kernel only asks), overlayfs (its lower layers change underneath),
/// `/proc` and `/sys` (made up by the kernel at each lookup).
fn local(path: &str) -> bool {
    match statfs::statfs(path) {
        Ok(s) => [
            statfs::EXT4_SUPER_MAGIC,
            statfs::XFS_SUPER_MAGIC,
            statfs::BTRFS_SUPER_MAGIC,
            statfs::TMPFS_MAGIC,
            statfs::F2FS_SUPER_MAGIC,
        ]
        .contains(&s.filesystem_type()),
        Err(_) => false,
    }
}

/// A path whose inode is watched: what its events drop. `dir`: a registered directory (keys
/// below it may be kept), with its `st_dev`.
#[derive(Clone, Copy)]
struct Watched {
    wd: WatchDescriptor,
    dev: u64,
    dir: bool,
}

struct State {
    /// `None`: inotify could not be had (retried at each drain); nothing is kept.
    fd: Option<Arc<Inotify>>,
    /// `/proc/thread-self/mountinfo`, polled for mount table changes; `None`: nothing is kept.
    mounts: Option<File>,
    keys: BTreeMap<String, Kept>,
    /// Paths whose inode has a watch, by path (dropped with the keys below them).
    paths: BTreeMap<String, Watched>,
    /// The paths each watch stands for (a hard-linked file, a directory mounted twice: more than
    /// one). A watch with no path left is spent: its events change nothing kept.
    wds: HashMap<WatchDescriptor, Vec<String>>,
    /// Every watch the descriptor holds, kept or not (for the bound).
    watches: HashSet<WatchDescriptor>,
    /// Bumped by every drain that read an event (or started over): an answer asked before it is
    /// not kept.
    epoch: u64,
    /// A bound was reached: the next drain starts over.
    full: bool,
    #[cfg(test)]
    asked: Vec<String>,
    #[cfg(test)]
    starts: u64,
}

/// The daemon's kept `lstat` answers (one per engine, shared by every judgement).
pub(crate) struct Lookups {
    state: Mutex<State>,
    max_keys: usize,
    max_watches: usize,
}

impl Default for Lookups {
    fn default() -> Lookups {
        Lookups::bounded(MAX_KEYS, MAX_WATCHES)
    }
}

/// The directory of a canonical absolute path (`/` for `/name`; `None` for `/`).
fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

/// What the walk builds: absolute, no empty, `.` or `..` component, no trailing `/`.
fn canonical(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/') && path[1..].split('/').all(|c| !matches!(c, "" | "." | "..")))
}

fn below(key: &str, path: &str) -> bool {
    path == "/"
        || key == path
        || (key.len() > path.len() && key.starts_with(path) && key.as_bytes()[path.len()] == b'/')
}

impl Lookups {
    /// With other bounds (the tests fill them).
    pub(crate) fn bounded(max_keys: usize, max_watches: usize) -> Lookups {
        let mut state = State {
            fd: None,
            mounts: None,
            keys: BTreeMap::new(),
            paths: BTreeMap::new(),
            wds: HashMap::new(),
            watches: HashSet::new(),
            epoch: 0,
            full: false,
            #[cfg(test)]
            asked: Vec::new(),
            #[cfg(test)]
            starts: 0,
        };
        state.start_over();
        Lookups {
            state: Mutex::new(state),
            max_keys,
            max_watches,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => {
                // A panic while the table was being changed: it may be half changed.
                let mut s = poisoned.into_inner();
                s.start_over();
                self.state.clear_poison();
                s
            }
        }
    }

    /// Reads every pending change (before a judgement's first lookup): afterwards every kept
    /// answer is the kernel's for every change that finished before the call.
    pub(crate) fn drain(&self) {
        self.lock().drain();
    }

    /// `lstat(path)`: the kept answer, else the kernel's (kept when it can be).
    pub(crate) fn lstat(&self, path: &str) -> io::Result<Metadata> {
        let (epoch, fd, parent) = {
            let s = self.lock();
            if let Some(kept) = s.keys.get(path) {
                return kept.answer();
            }
            let parent = parent_of(path).map(|p| s.paths.get(p).copied());
            (s.epoch, s.fd.clone(), parent)
        };
        self.count(path);
        let first = std::fs::symlink_metadata(path);
        let Some(fd) = fd.filter(|_| canonical(path)) else {
            return first;
        };
        // `/`'s registration first: every other key hangs from it.
        let parent = match parent {
            Some(None) if path.len() > 1 && !path[1..].contains('/') => {
                let _ = self.lstat("/");
                let s = self.lock();
                if s.epoch != epoch {
                    return first;
                }
                Some(s.paths.get("/").copied())
            }
            p => p,
        };
        // The parent's `st_dev`, when it is registered; `/` has none.
        let parent_dev = match parent {
            None => None,
            Some(Some(w)) if w.dir => Some(w.dev),
            Some(_) => return first,
        };
        let (kept, watched) = match &first {
            Err(e) => match e.raw_os_error() {
                Some(code)
                    if parent_dev.is_some()
                        && (code == Errno::ENOENT as i32 || code == Errno::ENAMETOOLONG as i32) =>
                {
                    (Kept::of(&first), None)
                }
                _ => return first,
            },
            Ok(m) => {
                let dir = m.is_dir();
                let other_fs = parent_dev != Some(m.dev());
                if parent_dev.is_none() && !dir {
                    return first;
                }
                if other_fs && !dir {
                    return first;
                }
                if other_fs && !local(path) {
                    return first;
                }
                let mask = if dir { dir_mask() } else { file_mask() };
                self.count(path);
                let Ok(wd) = fd.add_watch(path, mask) else {
                    return first;
                };
                self.count(path);
                let second = std::fs::symlink_metadata(path);
                let same = matches!(&second, Ok(n) if n.dev() == m.dev()
                    && n.ino() == m.ino()
                    && n.file_type() == m.file_type());
                let mut s = self.lock();
                s.watches.insert(wd);
                if !same {
                    return second;
                }
                drop(s);
                (
                    Kept::of(&second),
                    Some(Watched {
                        wd,
                        dev: m.dev(),
                        dir,
                    }),
                )
            }
        };
        between();
        let mut s = self.lock();
        let keep = s.epoch == epoch
            && !s.full
            && s.fd.as_ref().is_some_and(|f| Arc::ptr_eq(f, &fd))
            && !s.keys.contains_key(path);
        if keep {
            if s.keys.len() >= self.max_keys || s.watches.len() > self.max_watches {
                s.full = true;
            } else {
                if let Some(w) = watched {
                    s.paths.insert(path.to_owned(), w);
                    let ps = s.wds.entry(w.wd).or_default();
                    if !ps.iter().any(|p| p == path) {
                        ps.push(path.to_owned());
                    }
                }
                s.keys.insert(path.to_owned(), kept.clone());
            }
        }
        kept.answer()
    }

    #[cfg(test)]
    fn count(&self, path: &str) {
        self.lock().asked.push(path.to_owned());
    }

    #[cfg(not(test))]
    fn count(&self, _: &str) {}

    /// Times it started over (the mount table changed, events were lost, a bound, no inotify).
    #[cfg(test)]
    pub(crate) fn starts(&self) -> u64 {
        self.lock().starts
    }

    /// The paths below `dir` the kernel was asked about so far (`lstat`s and watches), in order.
    #[cfg(test)]
    pub(crate) fn asked_below(&self, dir: &str) -> Vec<String> {
        let s = self.lock();
        s.asked.iter().filter(|p| below(p, dir)).cloned().collect()
    }

    /// Whether `path`'s answer is kept.
    #[cfg(test)]
    pub(crate) fn kept(&self, path: &str) -> bool {
        self.lock().keys.contains_key(path)
    }

    /// Answers kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().keys.len()
    }
}

#[cfg(test)]
thread_local! {
    /// Run once between a lookup's kernel answers and their storing (the tests' race).
    static BETWEEN: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn between() {
    if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
        f();
    }
}

#[cfg(not(test))]
fn between() {}

impl State {
    /// Everything dropped; a new inotify descriptor (the old one's watches go with it).
    fn start_over(&mut self) {
        #[cfg(test)]
        {
            self.starts += 1;
        }
        self.keys.clear();
        self.paths.clear();
        self.wds.clear();
        self.watches.clear();
        self.full = false;
        self.epoch += 1;
        self.fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .ok()
            .map(Arc::new);
        if self.mounts.is_none() {
            self.mounts = File::open("/proc/thread-self/mountinfo").ok();
        }
        if self.mounts.is_none() {
            self.fd = None;
        }
    }

    /// Whether the mount table changed since the last poll (or cannot be told).
    fn mounts_changed(&self) -> bool {
        let Some(m) = &self.mounts else {
            return true;
        };
        let mut fds = [PollFd::new(m.as_fd(), PollFlags::POLLPRI)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0]
                .revents()
                .is_none_or(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR)),
            Err(_) => true,
        }
    }

    fn drain(&mut self) {
        if self.full || self.fd.is_none() || self.mounts_changed() {
            self.start_over();
            return;
        }
        let Some(fd) = self.fd.clone() else {
            return;
        };
        let mut seen = 0;
        loop {
            match fd.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => {
                    seen += events.len();
                    self.epoch += 1;
                    if seen > MAX_EVENTS {
                        self.start_over();
                        return;
                    }
                    for ev in events {
                        if !self.apply(ev) {
                            self.start_over();
                            return;
                        }
                    }
                }
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    self.start_over();
                    return;
                }
            }
        }
    }

    /// One event's drops; `false`: start over (events were lost).
    fn apply(&mut self, ev: InotifyEvent) -> bool {
        if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            return false;
        }
        if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
            // The watch is gone: nothing below its paths is watched any more.
            self.watches.remove(&ev.wd);
            for p in self.wds.remove(&ev.wd).unwrap_or_default() {
                self.drop_below(&p);
            }
            return true;
        }
        // A watch with no path: nothing kept depends on it.
        let Some(paths) = self.wds.get(&ev.wd).cloned() else {
            return true;
        };
        match &ev.name {
            Some(name) => {
                let name = name.to_string_lossy();
                for p in &paths {
                    let child = if p == "/" {
                        format!("/{name}")
                    } else {
                        format!("{p}/{name}")
                    };
                    self.drop_below(&child);
                    if ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                        // A subdirectory came or went: the directory's link count.
                        self.keys.remove(p);
                    }
                }
            }
            None => {
                for p in &paths {
                    self.drop_below(p);
                }
            }
        }
        true
    }

    /// Drops `path`'s answer and registration and everything below it.
    fn drop_below(&mut self, path: &str) {
        let doomed: Vec<String> = if path == "/" {
            self.keys.keys().cloned().collect()
        } else {
            let below_end = format!("{path}0");
            let mut v: Vec<String> = self
                .keys
                .range(format!("{path}/")..below_end)
                .map(|(k, _)| k.clone())
                .collect();
            if self.keys.contains_key(path) {
                v.push(path.to_owned());
            }
            v
        };
        for k in doomed {
            self.keys.remove(&k);
        }
        let gone: Vec<(String, WatchDescriptor)> = if path == "/" {
            self.paths.iter().map(|(k, w)| (k.clone(), w.wd)).collect()
        } else {
            let mut v: Vec<(String, WatchDescriptor)> = self
                .paths
                .range(format!("{path}/")..format!("{path}0"))
                .map(|(k, w)| (k.clone(), w.wd))
                .collect();
            if let Some(w) = self.paths.get(path) {
                v.push((path.to_owned(), w.wd));
            }
            v
        };
        for (p, wd) in gone {
            debug_assert!(below(&p, path));
            self.paths.remove(&p);
            if let Some(ps) = self.wds.get_mut(&wd) {
                ps.retain(|x| *x != p);
                if ps.is_empty() {
                    self.wds.remove(&wd);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kernel;
    use crate::engine::memo::Memo;
    use cmdgate_policy::decide::kernel::{PathResolver, Resolution};
    use proptest::prelude::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    impl Lookups {
        /// The kept answers of paths below `dir`: (path, kind, links, dev, ino) or the error.
        fn kept_below(&self, dir: &str) -> Vec<(String, Kept)> {
            let s = self.lock();
            s.keys
                .iter()
                .filter(|(k, _)| below(k, dir))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }
    }

    /// What the walk reads of an answer.
    fn read(got: &io::Result<Metadata>) -> String {
        match got {
            Ok(m) => format!(
                "{:?} links {} id {}:{}",
                m.file_type(),
                m.nlink(),
                m.dev(),
                m.ino()
            ),
            Err(e) => format!("error {:?}", e.raw_os_error()),
        }
    }

    /// A tree: directories, files, a hard link in another directory, links.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("a/b/c")).unwrap();
        std::fs::create_dir_all(p.join("other")).unwrap();
        std::fs::write(p.join("a/f"), "x").unwrap();
        std::fs::write(p.join("a/b/g"), "x").unwrap();
        symlink("a/b", p.join("rel")).unwrap();
        symlink(p.join("a"), p.join("abs")).unwrap();
        dir
    }

    /// Names a decision asks about in the tree.
    const ASKED: &[&str] = &[
        "",
        "a",
        "a/f",
        "a/b",
        "a/b/g",
        "a/b/c",
        "a/b/c/h",
        "a/new",
        "rel",
        "rel/g",
        "abs/f",
        "abs/b/c",
        "other",
        "other/x",
        "other/hl",
        "a2",
        "a2/f",
        "a2/b/g",
        "missing/deep",
    ];

    /// One decision: the drain, then every asked name through a judgement's memo over `kept`,
    /// each equal to the kernel's fresh resolution; then every answer kept below the tree
    /// equal to a fresh `lstat` in what the walk reads.
    fn decide_and_check(kept: &Lookups, d: &str) -> Result<(), TestCaseError> {
        let memo = Memo::over(kept);
        for n in ASKED {
            let p = if n.is_empty() {
                d.to_owned()
            } else {
                format!("{d}/{n}")
            };
            let got = memo.resolve(&p);
            let fresh = kernel::resolve(&p);
            prop_assert_eq!(got, fresh, "{}", p);
        }
        drop(memo);
        kept.drain();
        for (k, v) in kept.kept_below(d) {
            prop_assert_eq!(
                read(&v.answer()),
                read(&std::fs::symlink_metadata(&k)),
                "kept {}",
                k
            );
        }
        Ok(())
    }

    /// A change to the tree (failures are fine: the state may not allow it).
    #[derive(Debug, Clone)]
    enum Change {
        Rename(&'static str, &'static str),
        /// The name (whatever it is) replaced by a link to a target.
        LinkSwap(&'static str, &'static str),
        Chmod(&'static str, u32),
        Chown(&'static str, u32),
        Unlink(&'static str),
        Mkdir(&'static str),
        /// A hard link made to a file from another directory, or removed there.
        LinkElsewhere(&'static str),
        UnlinkElsewhere,
        /// More events than the queue holds.
        Overflow,
    }

    const NAMES: &[&str] = &[
        "a", "a/f", "a/b", "a/b/g", "a/b/c", "a/new", "a2", "rel", "other", "other/x", "a/b/c/h",
    ];

    fn change() -> impl Strategy<Value = Change> {
        let name = || prop::sample::select(NAMES.to_vec());
        prop_oneof![
            (name(), name()).prop_map(|(a, b)| Change::Rename(a, b)),
            Just(Change::Rename("a", "a2")),
            Just(Change::Rename("a2", "a")),
            (
                name(),
                prop::sample::select(vec!["a/b", "../a", "other", "a/f", "nowhere", "/"])
            )
                .prop_map(|(a, t)| Change::LinkSwap(a, t)),
            (
                name(),
                prop::sample::select(vec![0o000, 0o700, 0o755, 0o644])
            )
                .prop_map(|(a, m)| Change::Chmod(a, m)),
            (name(), prop::sample::select(vec![0, 1])).prop_map(|(a, u)| Change::Chown(a, u)),
            name().prop_map(Change::Unlink),
            name().prop_map(Change::Mkdir),
            prop::sample::select(vec!["a/f", "a/b/g", "a2/f"]).prop_map(Change::LinkElsewhere),
            Just(Change::UnlinkElsewhere),
            Just(Change::Overflow),
        ]
    }

    /// Whether changing `n` stays inside the tree `d`: its directory resolves inside the tree,
    /// and (`follows`: the call follows a final link, as `chmod` does) it is not a link. The
    /// changes are made through names that may be links (to `/` among others): without this a
    /// case could rename, remove or `chmod` the machine's own files.
    fn inside(d: &Path, n: &str, follows: bool) -> bool {
        let p = d.join(n);
        let (Ok(top), Some(Ok(dir))) = (
            std::fs::canonicalize(d),
            p.parent().map(std::fs::canonicalize),
        ) else {
            return false;
        };
        dir.starts_with(&top)
            && !(follows && std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()))
    }

    fn apply(d: &Path, c: &Change) {
        let p = |n: &str| d.join(n);
        let remove = |n: &str| {
            if inside(d, n, false) {
                let _ = std::fs::remove_file(p(n)).or_else(|_| std::fs::remove_dir_all(p(n)));
            }
        };
        match c {
            Change::Rename(a, b) => {
                if inside(d, a, false) && inside(d, b, false) {
                    let _ = std::fs::rename(p(a), p(b));
                }
            }
            Change::LinkSwap(a, t) => {
                remove(a);
                if inside(d, a, false) {
                    let _ = symlink(t, p(a));
                }
            }
            Change::Chmod(a, m) => {
                if inside(d, a, true) {
                    let _ = std::fs::set_permissions(p(a), std::fs::Permissions::from_mode(*m));
                }
            }
            Change::Chown(a, u) => {
                if inside(d, a, false) {
                    let _ = std::os::unix::fs::lchown(p(a), Some(*u), None);
                }
            }
            Change::Unlink(a) => remove(a),
            Change::Mkdir(a) => {
                if inside(d, a, false) {
                    let _ = std::fs::create_dir(p(a));
                }
            }
            Change::LinkElsewhere(a) => {
                if inside(d, a, false) && inside(d, "other/hl", false) {
                    let _ = std::fs::hard_link(p(a), p("other/hl"));
                }
            }
            Change::UnlinkElsewhere => remove("other/hl"),
            Change::Overflow => overflow(d),
        }
    }

    /// Queues more events than inotify holds: attribute changes of two names in turn (the
    /// kernel merges an event equal to the last one queued).
    fn overflow(d: &Path) {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        let one = d.join("flood1");
        let two = d.join("flood2");
        std::fs::write(&one, "").unwrap();
        std::fs::write(&two, "").unwrap();
        for i in 0..max / 2 + 8 {
            let m = std::fs::Permissions::from_mode(0o600 | (i as u32 & 0o44));
            std::fs::set_permissions(&one, m.clone()).unwrap();
            std::fs::set_permissions(&two, m).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any interleaving of decisions and changes — renames (of ancestors too), a name
        /// swapped for a link, a directory replaced by a link, modes, owners, unlinks, new
        /// directories, hard links made and removed from another directory, a flooded queue —
        /// and every kept answer is a fresh lookup's after each decision.
        #[test]
        fn kept_answers_are_fresh_after_any_changes(
            changes in prop::collection::vec(change(), 1..24),
        ) {
            let dir = tree();
            let d = dir.path().display().to_string();
            let kept = Lookups::default();
            decide_and_check(&kept, &d)?;
            decide_and_check(&kept, &d)?;
            for c in &changes {
                apply(dir.path(), c);
                // The flood's files are watched only through the tree's directory.
                decide_and_check(&kept, &d)?;
            }
            // Leave the tree removable.
            for n in ["a", "a2", "a/b", "a/b/c", "other"] {
                if inside(dir.path(), n, true) {
                    let _ = std::fs::set_permissions(dir.path().join(n), std::fs::Permissions::from_mode(0o755));
                }
            }
        }
    }

    /// Decisions on three threads while a fourth changes the tree: once the changes stop, one
    /// drain leaves every kept answer a fresh lookup's. An answer asked before a change and
    /// stored after another decision's drain read that change's event would stay stale: it is
    /// not stored (`epoch`).
    #[test]
    fn concurrent_decisions_keep_nothing_stale() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tree();
        let d = dir.path().display().to_string();
        let kept = Arc::new(Lookups::default());
        let stop = Arc::new(AtomicBool::new(false));
        let deciders: Vec<_> = (0..3)
            .map(|_| {
                let (kept, stop, d) = (Arc::clone(&kept), Arc::clone(&stop), d.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let memo = Memo::over(&kept);
                        for n in ASKED {
                            let _ = memo.resolve(&format!("{d}/{n}"));
                        }
                    }
                })
            })
            .collect();
        let changes = [
            Change::Rename("a", "a2"),
            Change::LinkElsewhere("a2/f"),
            Change::Rename("a2", "a"),
            Change::Chmod("a/f", 0o600),
            Change::LinkSwap("a/b/g", "a/f"),
            Change::UnlinkElsewhere,
            Change::Mkdir("a/b/c/h"),
            Change::Rename("a/b", "other/x"),
            Change::Rename("other/x", "a/b"),
            Change::Unlink("a/b/c/h"),
            Change::LinkSwap("rel", "other"),
            Change::LinkSwap("rel", "a/b"),
            Change::Chmod("a/f", 0o644),
            Change::Unlink("a/b/g"),
            Change::Mkdir("a/b/g"),
            Change::Unlink("a/b/g"),
        ];
        for round in 0..40 {
            for c in &changes {
                apply(dir.path(), c);
            }
            if round % 8 == 0 {
                std::thread::yield_now();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in deciders {
            t.join().unwrap();
        }
        kept.drain();
        for (k, v) in kept.kept_below(&d) {
            assert_eq!(
                read(&v.answer()),
                read(&std::fs::symlink_metadata(&k)),
                "kept {k}"
            );
        }
        decide_and_check(&kept, &d).unwrap();
    }

    /// A change made between a lookup's kernel answers and their storing, whose event another
    /// decision's drain reads first, keeps the answer out: for a missing name (created) and a
    /// file (hard-linked from another directory). Fails without the `epoch` check.
    #[test]
    fn an_answer_is_not_kept_past_a_drain_that_read_its_change() {
        let dir = tree();
        let d = dir.path().display().to_string();
        let kept = Arc::new(Lookups::default());
        decide_and_check(&kept, &d).unwrap();
        std::fs::write(dir.path().join("a/fresh"), "x").unwrap();
        kept.drain();
        type Race = Box<dyn FnOnce()>;
        let races: Vec<(String, Race)> = vec![
            (format!("{d}/a/new2"), {
                let (kept, p) = (Arc::clone(&kept), dir.path().join("a/new2"));
                Box::new(move || {
                    std::fs::write(p, "").unwrap();
                    kept.drain();
                })
            }),
            (format!("{d}/a/fresh"), {
                let kept = Arc::clone(&kept);
                let (p, q) = (dir.path().join("a/fresh"), dir.path().join("other/hl2"));
                Box::new(move || {
                    std::fs::hard_link(p, q).unwrap();
                    kept.drain();
                })
            }),
        ];
        for (path, race) in races {
            BETWEEN.with(|b| *b.borrow_mut() = Some(race));
            let _ = kept.lstat(&path);
            assert!(
                BETWEEN.with(|b| b.borrow().is_none()),
                "{path}: the race ran"
            );
            kept.drain();
            if let Some((_, v)) = kept.kept_below(&path).into_iter().find(|(k, _)| *k == path) {
                assert_eq!(
                    read(&v.answer()),
                    read(&std::fs::symlink_metadata(&path)),
                    "{path} kept past its change"
                );
            }
            decide_and_check(&kept, &d).unwrap();
        }
    }

    /// A second decision over unchanged paths asks the kernel nothing; a flooded queue drops
    /// everything (and the answers stay right).
    #[test]
    fn unchanged_paths_are_not_asked_again_and_an_overflow_drops_everything() {
        let dir = tree();
        let d = dir.path().display().to_string();
        let kept = Lookups::default();
        decide_and_check(&kept, &d).unwrap();
        // Other tests make and remove directories in the tree's parent meanwhile (its link
        // count): only the tree's own paths are counted.
        let asked = kept.asked_below(&d);
        let starts = kept.starts();
        let n = kept.len();
        assert!(n >= 12, "answers are kept ({n})");
        decide_and_check(&kept, &d).unwrap();
        // Unless a mount somewhere on the machine made it start over meanwhile.
        if kept.starts() == starts {
            assert_eq!(
                kept.asked_below(&d)[asked.len()..],
                [] as [String; 0],
                "nothing asked again"
            );
        }
        overflow(dir.path());
        kept.drain();
        assert_eq!(kept.len(), 0, "an overflow drops everything");
        decide_and_check(&kept, &d).unwrap();
    }

    /// Nothing on a file system inotify cannot vouch for is kept (`/proc` here), and its
    /// answers are the kernel's.
    #[test]
    fn nothing_is_kept_on_other_file_systems() {
        let kept = Lookups::default();
        for _ in 0..2 {
            let memo = Memo::over(&kept);
            for p in ["/proc/sys/kernel/ostype", "/proc/self/root/proc/sys"] {
                assert_eq!(memo.resolve(p), kernel::resolve(p), "{p}");
            }
        }
        assert!(kept.kept("/"), "the root file system is local here");
        assert!(!kept.kept("/proc"), "/proc is not kept");
        assert!(!kept.kept("/proc/sys"));
        assert!(!kept.kept("/proc/sys/kernel/ostype"));
    }

    /// At a bound nothing more is kept, the answers stay the kernel's, and the next drain starts
    /// over.
    #[test]
    fn the_bounds_hold() {
        let dir = tree();
        let d = dir.path().display().to_string();
        let kept = Lookups::bounded(6, 4);
        let memo = Memo::over(&kept);
        for n in ASKED {
            let p = format!("{d}/{n}");
            assert_eq!(memo.resolve(&p), kernel::resolve(&p), "{p}");
        }
        assert!(kept.len() <= 6, "{}", kept.len());
        drop(memo);
        kept.drain();
        assert_eq!(kept.len(), 0, "started over");
    }

    /// A mount over a kept directory (inotify does not report it) is seen by the mount table's
    /// poll: in a mount namespace of this test's own thread.
    #[test]
    fn a_mount_drops_everything() {
        let dir = tree();
        let d = dir.path().display().to_string();
        let got = std::thread::spawn(move || -> Result<(), String> {
            use nix::mount::{mount, MsFlags};
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                .map_err(|e| format!("unshare: {e}"))?;
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| format!("private: {e}"))?;
            let kept = Lookups::default();
            let g = format!("{d}/a/b/g");
            for _ in 0..2 {
                assert_eq!(Memo::over(&kept).resolve(&g), kernel::resolve(&g));
            }
            assert!(kept.kept(&g));
            mount(
                Some("tmpfs"),
                format!("{d}/a/b").as_str(),
                Some("tmpfs"),
                MsFlags::empty(),
                None::<&str>,
            )
            .map_err(|e| format!("mount: {e}"))?;
            let after = Memo::over(&kept).resolve(&g);
            assert!(matches!(after, Resolution::Missing { .. }), "{after:?}");
            assert_eq!(after, kernel::resolve(&g));
            Ok(())
        })
        .join()
        .unwrap();
        got.unwrap();
    }
}

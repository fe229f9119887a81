//! The mirror's mount namespace, built by one linear function: each step says why it is there.
//!
//! Runs in the run's pid 1 (already in a fresh pid namespace), before any untrusted code.

use crate::syscall::{
    Syscall, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};
use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// One overlay: the host path is both the read-only lower layer and the mount point in the mirror.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayMount {
    /// Absolute host path mirrored (workspace, $HOME, extra writable path).
    pub target: PathBuf,
    /// Upper dir on the scratch tmpfs: after the run it holds exactly the changes.
    pub upper: PathBuf,
    /// Overlay work dir on the same tmpfs.
    pub work: PathBuf,
}

/// A directory on the scratch tmpfs bound over a host path (/tmp, /dev/shm, /run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchBind {
    /// Directory on the scratch tmpfs.
    pub source: PathBuf,
    /// Absolute path inside the mirror.
    pub target: PathBuf,
}

/// Everything [`enter_mirror`] needs, computed by the helper before forking pid 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPlan {
    /// Empty directory on the scratch tmpfs that becomes `/`.
    pub new_root: PathBuf,
    /// The scratch tmpfs mount point (hidden inside the mirror).
    pub scratch: PathBuf,
    /// Overlays, outer paths first (so $HOME is mounted before a workspace inside it).
    pub overlays: Vec<OverlayMount>,
    /// Writable scratch dirs (/tmp, /run), mounted before the overlays.
    pub binds: Vec<ScratchBind>,
    /// /dev/shm's scratch dir (mounted on the fresh /dev).
    pub shm: PathBuf,
    /// Keep the host network namespace.
    pub network: bool,
    /// Host paths hidden inside the mirror, mounted over after the overlays (so a mask under
    /// $HOME covers the home overlay).
    #[serde(default)]
    pub masks: Vec<Mask>,
}

/// A host path made unreachable inside the mirror.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mask {
    /// Absolute path.
    pub path: PathBuf,
    /// A directory (covered by an empty read-only tmpfs); otherwise covered by an empty read-only
    /// placeholder file.
    pub dir: bool,
    /// A directory's entries on the host (name, is a directory), at most
    /// `maskwatch::PLACEHOLDERS`: the tmpfs gets an empty placeholder for each, so opening
    /// `~/.ssh/id_rsa` opens an empty file the mask watch sees instead of failing unseen. Names
    /// only, never content.
    #[serde(default)]
    pub entries: Vec<(String, bool)>,
}

/// Device nodes the mirror's /dev gets (bound from the host's /dev).
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// /proc entries that stay read-only (kernel knobs, sysrq, bus/irq settings).
pub const PROC_READ_ONLY: [&str; 5] = ["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// /proc entries hidden behind /dev/null (kernel memory and key listings).
pub const PROC_MASKED: [&str; 4] = ["kcore", "keys", "timer_list", "kallsyms"];

/// The mirror's hostname (step 9; in a UTS namespace made ahead, set when it was made).
pub const HOSTNAME: &str = "cmdgate-mirror";

/// What a prepared helper made before the run was known, each held only by that single-use
/// helper as an fd (`helper::prepare`): pid 1 uses each instead of making it on the run's path,
/// and makes what is `None` itself, as before.
#[derive(Debug, Default)]
pub struct MadeAhead {
    /// An empty network namespace no process is in (`helper::fresh_namespaces`).
    pub net: Option<OwnedFd>,
    /// An empty IPC namespace no process is in.
    pub ipc: Option<OwnedFd>,
    /// A UTS namespace no process is in, its hostname already [`HOSTNAME`].
    pub uts: Option<OwnedFd>,
    /// The mirror's `/dev` as a detached mount tree ([`prepare_dev`]).
    pub dev: Option<OwnedFd>,
    /// The workspace's overlay as a detached mount ([`prepare_overlay`]) and the host path it
    /// is mounted on, when the helper checked at `Run` that it was made for this run's
    /// workspace as it is now (`helper::PreparedOverlay::still_for`).
    pub overlay: Option<(PathBuf, OwnedFd)>,
}

impl MadeAhead {
    /// The fds, for [`enter_mirror`].
    pub fn raw(&self) -> Ahead<'_> {
        let raw = |fd: &Option<OwnedFd>| fd.as_ref().map(AsRawFd::as_raw_fd);
        Ahead {
            net: raw(&self.net),
            ipc: raw(&self.ipc),
            uts: raw(&self.uts),
            dev: raw(&self.dev),
            overlay: self
                .overlay
                .as_ref()
                .map(|(target, fd)| (target.as_path(), fd.as_raw_fd())),
        }
    }
}

/// The fds of a [`MadeAhead`] (kept open by the caller for the call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ahead<'a> {
    /// See [`MadeAhead::net`].
    pub net: Option<RawFd>,
    /// See [`MadeAhead::ipc`].
    pub ipc: Option<RawFd>,
    /// See [`MadeAhead::uts`].
    pub uts: Option<RawFd>,
    /// See [`MadeAhead::dev`].
    pub dev: Option<RawFd>,
    /// See [`MadeAhead::overlay`].
    pub overlay: Option<(&'a Path, RawFd)>,
}

/// The mirror's `/dev` (step 7) built ahead as a detached mount tree: a new tmpfs (`fsmount`,
/// attached nowhere, so in no process's mount table) holding a bind of each of the host's
/// [`DEVICES`], the `fd`/`std*` links and an empty `shm` directory — exactly what step 7 builds
/// in place. Only the caller holds the fd (the single-use helper; nothing else can reach or
/// change the tree), and pid 1 attaches it whole with one `move_mount` instead of 18 calls.
/// `None` when the kernel cannot (binding into a detached tree needs Linux 6.15): pid 1 builds
/// `/dev` itself.
pub fn prepare_dev() -> Option<OwnedFd> {
    use crate::syscall::FsParam::Str;
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let tree = crate::syscall::new_fs(
        "tmpfs",
        &[
            Str("source", "tmpfs"),
            Str("mode", "0755"),
            Str("size", "65536"),
        ],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
    )
    .ok()?;
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
    for name in DEVICES {
        drop(openat(&tree, name, flags, Mode::from_bits_truncate(0o644)).ok()?);
        let node = crate::syscall::clone_mount(&Path::new("/dev").join(name), false).ok()?;
        crate::syscall::attach_below(node.as_raw_fd(), tree.as_raw_fd(), Path::new(name)).ok()?;
    }
    for (link, to) in DEV_LINKS {
        nix::unistd::symlinkat(to, &tree, link).ok()?;
    }
    nix::sys::stat::mkdirat(&tree, "shm", Mode::from_bits_truncate(0o1777)).ok()?;
    Some(tree)
}

/// The links of the mirror's `/dev` (name, target).
const DEV_LINKS: [(&str, &str); 4] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// A failed setup step; each step has its own variant so the report says exactly what broke.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Step 1.
    #[error("failed to unshare mount/ipc/uts/net namespaces")]
    Unshare(#[source] Errno),
    /// Step 1, with a namespace made ahead.
    #[error("failed to enter the run's {0} namespace made ahead")]
    EnterAhead(&'static str, #[source] Errno),
    /// Step 2.
    #[error("failed to make mount propagation private")]
    MakePrivate(#[source] Errno),
    /// Step 3.
    #[error("failed to attach the host root at {0}")]
    BindRoot(PathBuf, #[source] Errno),
    /// Step 4.
    #[error("failed to make the mirror's root read-only")]
    ReadOnlyRoot(#[source] Errno),
    /// Step 6.
    #[error("failed to mount the overlay on {0}")]
    Overlay(PathBuf, #[source] Errno),
    /// A path cannot be passed as an overlay option (`,` `:` `\` or not absolute/UTF-8).
    #[error("path {0} cannot be used as an overlay layer")]
    UnsupportedPath(PathBuf),
    /// Step 6b.
    #[error("failed to mask {0}")]
    Mask(PathBuf, #[source] Errno),
    /// Step 7.
    #[error("failed to build the minimal /dev at {0}")]
    Dev(PathBuf, #[source] Errno),
    /// Steps 5 and 7b.
    #[error("failed to mount the scratch dir on {0}")]
    ScratchBind(PathBuf, #[source] Errno),
    /// Step 8.
    #[error("failed to mount a fresh /proc")]
    Proc(#[source] Errno),
    /// Step 8b.
    #[error("failed to protect {0} inside /proc")]
    ProcProtect(PathBuf, #[source] Errno),
    /// Step 9.
    #[error("failed to set the mirror's hostname")]
    Hostname(#[source] Errno),
    /// Step 10.
    #[error("failed to pivot_root into the mirror")]
    PivotRoot(#[source] Errno),
    /// Step 11.
    #[error("failed to detach the host root")]
    DetachOldRoot(#[source] Errno),
}

/// `new_root` + an absolute host path.
pub fn inside(new_root: &Path, abs: &Path) -> PathBuf {
    new_root.join(abs.strip_prefix("/").unwrap_or(abs))
}

fn overlay_options(o: &OverlayMount) -> Result<String, SetupError> {
    let ok =
        |p: &Path| p.is_absolute() && p.to_str().is_some_and(|s| !s.contains([',', ':', '\\']));
    for p in [&o.target, &o.upper, &o.work] {
        if !ok(p) {
            return Err(SetupError::UnsupportedPath(p.clone()));
        }
    }
    // redirect_dir/metacopy/index off: the upper dir must be a plain, self-describing record of the
    // changes (no redirect xattrs or metadata-only copies) for the effects diff, whatever the
    // kernel's compiled-in defaults are.
    // volatile: the overlay never syncs its upper filesystem — not for the command's fsync or
    // syncfs, and not when the mount dies with the run (without it, that unmount is a syncfs of the
    // workspace's whole filesystem, every other process's dirty data included, on every run's
    // critical path). Durability is the commit's job: it flushes the upper dir's filesystem
    // before the first rename (`commit::journal::apply`), and a run kept for a later apply is
    // flushed before it is recorded as kept (`KeptUpper::keep_for`). The work dir a volatile
    // mount marks is never mounted again (each run has its own, removed after the run).
    let mut data = format!(
        "lowerdir={},upperdir={},workdir={}",
        o.target.display(),
        o.upper.display(),
        o.work.display()
    );
    for (key, value) in OVERLAY_OPTIONS {
        data.push(',');
        data.push_str(key);
        if let Some(value) = value {
            data.push('=');
            data.push_str(value);
        }
    }
    Ok(data)
}

/// Every overlay's options besides its layers ([`overlay_options`] says why each), one list for
/// an overlay mounted at the run and one made ahead ([`prepare_overlay`]): `key=value`, or a
/// flag without a value.
const OVERLAY_OPTIONS: [(&str, Option<&str>); 4] = [
    ("redirect_dir", Some("off")),
    ("metacopy", Some("off")),
    ("index", Some("off")),
    ("volatile", None),
];

/// An overlay with exactly the layers of the directories `lower`, `upper` and `work` (fds: the
/// inodes opened, whatever their paths name later) and [`overlay_options`]'s options, `nosuid`
/// and `nodev` as step 6 mounts it, made as a detached mount attached nowhere: the workspace's,
/// made by a prepared helper ahead of its run (`helper::overlay_ahead`) and attached by pid 1.
pub fn prepare_overlay(lower: &OwnedFd, upper: &OwnedFd, work: &OwnedFd) -> Result<OwnedFd, Errno> {
    use crate::syscall::FsParam::{Fd, Flag, Str};
    let mut params = vec![
        Str("source", "overlay"),
        Fd("lowerdir+", lower.as_raw_fd()),
        Fd("upperdir", upper.as_raw_fd()),
        Fd("workdir", work.as_raw_fd()),
    ];
    params.extend(OVERLAY_OPTIONS.map(|(key, value)| match value {
        Some(value) => Str(key, value),
        None => Flag(key),
    }));
    crate::syscall::new_fs("overlay", &params, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
}

fn bind_scratch<S: Syscall>(sys: &S, root: &Path, b: &ScratchBind) -> Result<(), SetupError> {
    let target = inside(root, &b.target);
    sys.mount(Some(&b.source), &target, None, MsFlags::MS_BIND, None)
        .and_then(|()| sys.mount_setattr(&target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false))
        .map_err(|e| SetupError::ScratchBind(b.target.clone(), e))
}

/// Build the mirror and enter it: afterwards `/` is the mirror and the host root is gone.
/// `host_root` is a detached copy of the host's mount tree taken before the scratch tmpfs was
/// mounted ([`crate::syscall::clone_tree`]). `ahead` is what the helper made when it was
/// prepared ([`MadeAhead`]): namespaces no process has entered and a detached `/dev`, each used
/// instead of making it here. Returns how many masks were not mounted because their path was
/// gone by then (step 6b; not counting those under the fresh scratch `/tmp` or `/run`, or below
/// another mask).
pub fn enter_mirror<S: Syscall>(
    sys: &S,
    plan: &MountPlan,
    host_root: RawFd,
    ahead: Ahead<'_>,
) -> Result<usize, SetupError> {
    let root = &plan.new_root;

    // 1. Private namespaces: our own mount table (so nothing we mount is seen by the host), IPC
    //    and UTS; an empty network namespace unless the run may use the network. The IPC, UTS
    //    and network ones the helper made when it was prepared (empty, entered by no process
    //    since: `helper::fresh_namespaces`; making them costs CPU, off the run's path there)
    //    are entered, the others made now. The pid namespace was unshared by the helper before
    //    it forked us (it only applies to children).
    let mut flags = CloneFlags::CLONE_NEWNS;
    let made = [
        (
            ahead.net,
            CloneFlags::CLONE_NEWNET,
            "network",
            !plan.network,
        ),
        (ahead.ipc, CloneFlags::CLONE_NEWIPC, "IPC", true),
        (ahead.uts, CloneFlags::CLONE_NEWUTS, "UTS", true),
    ];
    for (fd, kind, what, wanted) in made {
        match (wanted, fd) {
            (false, _) => {}
            (true, Some(fd)) => sys
                .enter_ns(fd, kind)
                .map_err(|e| SetupError::EnterAhead(what, e))?,
            (true, None) => flags |= kind,
        }
    }
    sys.unshare(flags).map_err(SetupError::Unshare)?;

    // 2. unshare(CLONE_NEWNS) copies the host's propagation: shared mounts would still send our
    //    mounts back to the host (and the host's into the mirror). Make everything private first.
    sys.mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )
    .map_err(SetupError::MakePrivate)?;

    // 3. The mirror starts as a copy of the whole host mount tree: every tool is where the
    //    command expects it. The helper cloned it (`open_tree`) before it mounted the scratch
    //    tmpfs, so the copy has no scratch in it: the upper dirs are not reachable from inside
    //    and nothing must be unmounted to hide them (an unmount waits for an RCU grace period).
    sys.attach_tree(host_root, root)
        .map_err(|e| SetupError::BindRoot(root.clone(), e))?;

    // 4. ...read-only, nosuid, nodev, recursively: a plain MS_RDONLY remount would only cover the
    //    top mount and leave every submount (/home, /var, ...) writable.
    sys.mount_setattr(
        root,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        true,
    )
    .map_err(SetupError::ReadOnlyRoot)?;

    // 5. /tmp and /run: writes there reached the host when only the workspace was overlaid.
    //    Bind scratch dirs (tmpfs, memory-accounted) so they are reported, not persisted. Before
    //    the overlays: a workspace under /tmp is then mounted on a directory the helper made in
    //    the scratch /tmp, instead of being hidden by it.
    for b in &plan.binds {
        bind_scratch(sys, root, b)?;
    }

    // 6. Writable views of the workspace and $HOME: overlays whose upper dirs live on the scratch
    //    tmpfs, so every write lands there and the host tree stays untouched (rollback = drop it).
    //    The workspace's, when the helper made it ahead with the same layers and options
    //    ([`prepare_overlay`]) and checked at `Run` that it is still for this workspace, is
    //    attached instead of mounted.
    for o in &plan.overlays {
        let at = inside(root, &o.target);
        let mounted = match ahead.overlay {
            Some((target, tree)) if target == o.target => sys.attach_tree(tree, &at),
            _ => sys.mount(
                Some(Path::new("overlay")),
                &at,
                Some("overlay"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(&overlay_options(o)?),
            ),
        };
        mounted.map_err(|e| SetupError::Overlay(o.target.clone(), e))?;
    }

    // 6b. Masks: cmdgate's own sockets, config and state (and any secret the operator lists)
    //     are unreachable, even read-only: a command that wrote its own admin client approved
    //     its own requests. After the overlays, so a mask inside $HOME covers the home overlay.
    //     A path missing in the mirror (under the fresh /tmp or /run) is already unreachable.
    //     Every mask is its own mount of a tmpfs (a directory's, or the one empty placeholder
    //     file on the scratch tmpfs, bound read-only over files), so the mask watch
    //     (`maskwatch`, fanotify mount marks) sees each open through it.
    let placeholder = plan.scratch.join("masked-file");
    let mut gone = 0;
    if plan.masks.iter().any(|m| !m.dir) {
        sys.create_file(&placeholder)
            .map_err(|e| SetupError::Mask(placeholder.clone(), e))?;
    }
    for m in &plan.masks {
        let target = inside(root, &m.path);
        let result = if m.dir && !m.entries.is_empty() {
            populated_mask(sys, &target, &m.entries)
        } else if m.dir {
            sys.mount(
                Some(Path::new("tmpfs")),
                &target,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=4k,mode=0555"),
            )
        } else {
            sys.mount(Some(&placeholder), &target, None, MsFlags::MS_BIND, None)
                .and_then(|()| {
                    sys.mount(
                        None,
                        &target,
                        None,
                        MsFlags::MS_BIND
                            | MsFlags::MS_REMOUNT
                            | MsFlags::MS_RDONLY
                            | MsFlags::MS_NOSUID
                            | MsFlags::MS_NODEV
                            | MsFlags::MS_NOEXEC,
                        None,
                    )
                })
        };
        // Missing as expected: under the fresh scratch /tmp or /run outside every overlay, or
        // below another mask (hidden by it).
        let scratch = (plan.binds.iter().any(|b| m.path.starts_with(&b.target))
            && !plan.overlays.iter().any(|o| m.path.starts_with(&o.target)))
            || plan
                .masks
                .iter()
                .any(|o| o.path != m.path && m.path.starts_with(&o.path));
        match result {
            Ok(()) => {}
            Err(Errno::ENOENT) if scratch => {}
            Err(Errno::ENOENT) => gone += 1,
            Err(e) => return Err(SetupError::Mask(m.path.clone(), e)),
        }
    }

    // 7. A minimal /dev: the host's /dev holds disks and consoles. A small tmpfs with only the
    //    harmless character devices, bound from the host (no mknod needed): the one the helper
    //    built ahead as a detached tree ([`prepare_dev`]), attached whole, else built here.
    let dev = inside(root, Path::new("/dev"));
    match ahead.dev {
        Some(tree) => sys
            .attach_tree(tree, &dev)
            .map_err(|e| SetupError::Dev(dev.clone(), e))?,
        None => build_dev(sys, &dev)?,
    }

    // 7b. /dev/shm, like /tmp.
    bind_scratch(
        sys,
        root,
        &ScratchBind {
            source: plan.shm.clone(),
            target: PathBuf::from("/dev/shm"),
        },
    )?;

    // 8. A fresh /proc for the new pid namespace: the host's lists host processes. We are its
    //    pid 1, so this proc shows only the run.
    let proc = inside(root, Path::new("/proc"));
    sys.mount(
        Some(Path::new("proc")),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    )
    .map_err(SetupError::Proc)?;
    // 8b. Kernel knobs stay read-only (a uid-0 command without capabilities could still write
    //     /proc/sysrq-trigger); kernel memory and key listings are masked. Missing entries are fine.
    for name in PROC_READ_ONLY {
        let p = proc.join(name);
        match sys.mount(Some(&p), &p, None, MsFlags::MS_BIND | MsFlags::MS_REC, None) {
            Ok(()) => sys
                .mount_setattr(
                    &p,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                    true,
                )
                .map_err(|e| SetupError::ProcProtect(p.clone(), e))?,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(SetupError::ProcProtect(p, e)),
        }
    }
    for name in PROC_MASKED {
        let p = proc.join(name);
        match sys.mount(Some(&dev.join("null")), &p, None, MsFlags::MS_BIND, None) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(SetupError::ProcProtect(p, e)),
        }
    }

    // 9. Our own hostname in our own UTS namespace: nothing the host sees changes (one made
    //    ahead has it already).
    if ahead.uts.is_none() {
        sys.sethostname(HOSTNAME).map_err(SetupError::Hostname)?;
    }

    // 10. Swap roots. pivot_root(".", ".") stacks the old root on top of the new one without a
    //     put_old directory (the new root is read-only, we could not create one).
    sys.chdir(root).map_err(SetupError::PivotRoot)?;
    sys.pivot_root(Path::new("."), Path::new("."))
        .map_err(SetupError::PivotRoot)?;

    // 11. Detach the host root stacked on "/": from now on no path leads out of the mirror.
    sys.umount_detach(Path::new("."))
        .map_err(SetupError::DetachOldRoot)?;
    sys.chdir(Path::new("/"))
        .map_err(SetupError::DetachOldRoot)?;
    Ok(gone)
}

/// Step 7 in place, when no `/dev` was built ahead ([`prepare_dev`] builds the same).
fn build_dev<S: Syscall>(sys: &S, dev: &Path) -> Result<(), SetupError> {
    sys.mount(
        Some(Path::new("tmpfs")),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=65536"),
    )
    .map_err(|e| SetupError::Dev(dev.to_path_buf(), e))?;
    for name in DEVICES {
        let node = dev.join(name);
        sys.create_file(&node)
            .map_err(|e| SetupError::Dev(node.clone(), e))?;
        let host = Path::new("/dev").join(name);
        sys.mount(Some(&host), &node, None, MsFlags::MS_BIND, None)
            .map_err(|e| SetupError::Dev(node.clone(), e))?;
    }
    for (link, to) in DEV_LINKS {
        let link = dev.join(link);
        sys.symlink(Path::new(to), &link)
            .map_err(|e| SetupError::Dev(link.clone(), e))?;
    }
    let shm = dev.join("shm");
    sys.mkdir(&shm, 0o1777)
        .map_err(|e| SetupError::Dev(shm.clone(), e))?;
    Ok(())
}

/// A directory mask with placeholders: an empty tmpfs, one empty file or directory per host
/// entry name (never a name with a separator), then read-only.
fn populated_mask<S: Syscall>(
    sys: &S,
    target: &Path,
    entries: &[(String, bool)],
) -> Result<(), Errno> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    sys.mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        flags,
        Some("size=4k,mode=0555"),
    )?;
    for (name, dir) in entries {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            continue;
        }
        let at = target.join(name);
        if *dir {
            sys.mkdir(&at, 0o555)?;
        } else {
            sys.create_file(&at)?;
        }
    }
    sys.mount(
        None,
        target,
        None,
        flags | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall::{Call, RecordingSyscall};

    fn plan() -> MountPlan {
        MountPlan {
            new_root: PathBuf::from("/s/run1/root"),
            scratch: PathBuf::from("/s/run1"),
            overlays: vec![
                OverlayMount {
                    target: PathBuf::from("/home/u"),
                    upper: PathBuf::from("/s/run1/up/0"),
                    work: PathBuf::from("/s/run1/work/0"),
                },
                OverlayMount {
                    target: PathBuf::from("/home/u/ws"),
                    upper: PathBuf::from("/s/run1/up/1"),
                    work: PathBuf::from("/s/run1/work/1"),
                },
            ],
            binds: vec![ScratchBind {
                source: PathBuf::from("/s/run1/tmp"),
                target: PathBuf::from("/tmp"),
            }],
            shm: PathBuf::from("/s/run1/shm"),
            network: false,
            masks: vec![
                Mask {
                    path: PathBuf::from("/home/u/.config/cmdgate"),
                    dir: true,
                    entries: Vec::new(),
                },
                Mask {
                    path: PathBuf::from("/home/u/cmdgate.sock"),
                    dir: false,
                    entries: Vec::new(),
                },
                Mask {
                    path: PathBuf::from("/home/u/.ssh"),
                    dir: true,
                    entries: vec![
                        ("id_rsa".into(), false),
                        ("keys".into(), true),
                        ("../escape".into(), false),
                    ],
                },
            ],
        }
    }

    fn position(calls: &[Call], pred: impl Fn(&Call) -> bool) -> usize {
        calls.iter().position(pred).expect("call missing")
    }

    #[test]
    fn setup_order_is_isolating() {
        let sys = RecordingSyscall::default();
        enter_mirror(&sys, &plan(), -1, Ahead::default()).expect("recording never fails");
        let calls = sys.calls();

        // unshare comes first, with an empty network namespace.
        let Call::Unshare(flags) = &calls[0] else {
            panic!("first call must be unshare, got {:?}", calls[0]);
        };
        assert!(flags.contains(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWNET));

        // then propagation is made private, recursively, on "/", before any other mount.
        assert_eq!(
            calls[1],
            Call::Mount {
                source: None,
                target: PathBuf::from("/"),
                fstype: None,
                flags: MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                data: None
            }
        );
        // then the copy of the host tree is attached, immediately made read-only recursively.
        assert_eq!(calls[2], Call::AttachTree(PathBuf::from("/s/run1/root")));
        assert_eq!(
            calls[3],
            Call::SetAttr(
                PathBuf::from("/s/run1/root"),
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                true
            )
        );

        // scratch binds before the overlays (a workspace under /tmp stays visible).
        let tmp = position(
            &calls,
            |c| matches!(c, Call::Mount { target, .. } if target == Path::new("/s/run1/root/tmp")),
        );
        // overlays: $HOME before the workspace inside it, explicit options.
        let home = position(
            &calls,
            |c| matches!(c, Call::Mount { target, .. } if target == Path::new("/s/run1/root/home/u")),
        );
        let ws = position(
            &calls,
            |c| matches!(c, Call::Mount { target, .. } if target == Path::new("/s/run1/root/home/u/ws")),
        );
        assert!(3 < tmp && tmp < home && home < ws);
        let Call::Mount {
            data: Some(data), ..
        } = &calls[ws]
        else {
            panic!("overlay without options");
        };
        assert!(
            data.ends_with("redirect_dir=off,metacopy=off,index=off,volatile"),
            "{data}"
        );

        // proc is mounted before the pivot, /proc/sys made read-only after it.
        let proc = position(
            &calls,
            |c| matches!(c, Call::Mount { fstype: Some(t), .. } if t == "proc"),
        );
        // masks after the overlays (a mask in $HOME covers the home overlay), before /dev.
        let mask_dir = position(
            &calls,
            |c| matches!(c, Call::Mount { target, flags, .. } if target == Path::new("/s/run1/root/home/u/.config/cmdgate") && flags.contains(MsFlags::MS_RDONLY)),
        );
        let mask_sock = position(
            &calls,
            |c| matches!(c, Call::Mount { source: Some(s), target, .. } if s == Path::new("/s/run1/masked-file") && target == Path::new("/s/run1/root/home/u/cmdgate.sock")),
        );
        let dev = position(
            &calls,
            |c| matches!(c, Call::Mount { target, .. } if target == Path::new("/s/run1/root/dev")),
        );
        assert!(ws < mask_dir && mask_dir < mask_sock && mask_sock < dev);
        // A masked directory's placeholders: tmpfs, the entries, then read-only; a name with a
        // separator is never created.
        let ssh = Path::new("/s/run1/root/home/u/.ssh");
        let ssh_tmpfs = position(
            &calls,
            |c| matches!(c, Call::Mount { target, fstype: Some(t), flags, .. } if target == ssh && t == "tmpfs" && !flags.contains(MsFlags::MS_RDONLY)),
        );
        let key = position(&calls, |c| *c == Call::CreateFile(ssh.join("id_rsa")));
        let sub = position(&calls, |c| *c == Call::Mkdir(ssh.join("keys")));
        let ssh_ro = position(
            &calls,
            |c| matches!(c, Call::Mount { target, flags, .. } if target == ssh && flags.contains(MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY)),
        );
        assert!(ssh_tmpfs < key && key < sub && sub < ssh_ro && ssh_ro < dev);
        assert!(!calls
            .iter()
            .any(|c| matches!(c, Call::CreateFile(p) if p.to_string_lossy().contains("escape"))));
        let sys_ro = position(
            &calls,
            |c| matches!(c, Call::SetAttr(p, a, _) if p.ends_with("proc/sys") && a & MOUNT_ATTR_RDONLY != 0),
        );
        // The only unmount is the old root's, after the pivot (the tree attached in step 3
        // never held the scratch tmpfs).
        assert_eq!(
            calls
                .iter()
                .filter(|c| matches!(c, Call::Detach(_)))
                .count(),
            1
        );
        let pivot = position(&calls, |c| matches!(c, Call::PivotRoot(..)));
        let detach = position(
            &calls,
            |c| matches!(c, Call::Detach(p) if p == Path::new(".")),
        );
        assert!(ws < proc && proc < sys_ro && sys_ro < pivot && pivot < detach);
        assert_eq!(calls[pivot - 1], Call::Chdir(PathBuf::from("/s/run1/root")));
        assert_eq!(calls.last(), Some(&Call::Chdir(PathBuf::from("/"))));
    }

    #[test]
    fn network_keeps_the_host_net_namespace() {
        let sys = RecordingSyscall::default();
        let mut p = plan();
        p.network = true;
        enter_mirror(&sys, &p, -1, Ahead::default()).expect("recording never fails");
        let Call::Unshare(flags) = &sys.calls()[0] else {
            panic!("first call must be unshare");
        };
        assert!(!flags.contains(CloneFlags::CLONE_NEWNET));
    }

    fn made_ahead() -> Ahead<'static> {
        Ahead {
            net: Some(7),
            ipc: Some(8),
            uts: Some(9),
            dev: None,
            overlay: None,
        }
    }

    #[test]
    fn namespaces_made_ahead_are_entered_first_and_never_a_network_one_for_a_network_run() {
        // Without network: the prepared namespaces are entered before anything else, no new
        // ones of their kinds are made, and the hostname (set when made) is not set again.
        let sys = RecordingSyscall::default();
        enter_mirror(&sys, &plan(), -1, made_ahead()).expect("recording never fails");
        let calls = sys.calls();
        assert_eq!(
            calls[..3],
            [
                Call::EnterNs(CloneFlags::CLONE_NEWNET),
                Call::EnterNs(CloneFlags::CLONE_NEWIPC),
                Call::EnterNs(CloneFlags::CLONE_NEWUTS)
            ]
        );
        assert_eq!(
            calls[3],
            Call::Unshare(CloneFlags::CLONE_NEWNS),
            "{calls:?}"
        );
        assert_eq!(
            calls
                .iter()
                .filter(|c| matches!(c, Call::EnterNs(_)))
                .count(),
            3
        );
        assert!(!calls.iter().any(|c| matches!(c, Call::Hostname(_))));
        // With network: the host's namespace stays, whatever was made ahead.
        let sys = RecordingSyscall::default();
        let mut p = plan();
        p.network = true;
        enter_mirror(&sys, &p, -1, made_ahead()).expect("recording never fails");
        let calls = sys.calls();
        assert!(
            !calls.contains(&Call::EnterNs(CloneFlags::CLONE_NEWNET)),
            "{calls:?}"
        );
        let Some(Call::Unshare(flags)) = calls.iter().find(|c| matches!(c, Call::Unshare(_)))
        else {
            panic!("no unshare: {calls:?}");
        };
        assert!(!flags.contains(CloneFlags::CLONE_NEWNET));
        // Only the network one made ahead: IPC and UTS made here, the hostname set here.
        let sys = RecordingSyscall::default();
        let ahead = Ahead {
            ipc: None,
            uts: None,
            ..made_ahead()
        };
        enter_mirror(&sys, &plan(), -1, ahead).expect("recording never fails");
        let calls = sys.calls();
        assert_eq!(calls[0], Call::EnterNs(CloneFlags::CLONE_NEWNET));
        assert_eq!(
            calls[1],
            Call::Unshare(
                CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS
            )
        );
        assert!(calls.contains(&Call::Hostname(HOSTNAME.into())));
    }

    #[test]
    fn a_dev_built_ahead_is_attached_whole_where_dev_would_be_built() {
        let dev = Path::new("/s/run1/root/dev");
        let in_dev = |c: &Call| match c {
            Call::Mount { target, .. } => target.starts_with(dev) && *target != dev.join("shm"),
            Call::CreateFile(p) | Call::Mkdir(p) | Call::Symlink(_, p) => p.starts_with(dev),
            _ => false,
        };
        // Built here: the tmpfs, the device binds, the links, shm.
        let sys = RecordingSyscall::default();
        enter_mirror(&sys, &plan(), -1, Ahead::default()).expect("recording never fails");
        let built = sys.calls();
        assert_eq!(built.iter().filter(|c| in_dev(c)).count(), 18, "{built:?}");
        // Made ahead: one attach at the same point of the order, nothing else under /dev but
        // the scratch /dev/shm bind, which follows it.
        let sys = RecordingSyscall::default();
        let ahead = Ahead {
            dev: Some(5),
            ..Ahead::default()
        };
        enter_mirror(&sys, &plan(), -1, ahead).expect("recording never fails");
        let calls = sys.calls();
        assert!(!calls.iter().any(in_dev), "{calls:?}");
        let attach = position(&calls, |c| *c == Call::AttachTree(dev.to_path_buf()));
        let first_built = position(&built, in_dev);
        assert_eq!(calls[..attach], built[..first_built]);
        let shm = position(
            &calls,
            |c| matches!(c, Call::Mount { target, .. } if target == &dev.join("shm")),
        );
        assert_eq!(shm, attach + 1);
    }

    #[test]
    fn a_workspace_overlay_made_ahead_is_attached_in_its_place_and_only_on_its_target() {
        let ws = Path::new("/s/run1/root/home/u/ws");
        let home = Path::new("/s/run1/root/home/u");
        let fresh = RecordingSyscall::default();
        enter_mirror(&fresh, &plan(), -1, Ahead::default()).expect("recording never fails");
        let fresh = fresh.calls();
        let mounted = position(
            &fresh,
            |c| matches!(c, Call::Mount { target, .. } if target == ws),
        );
        // Made ahead for the workspace: attached where it would be mounted, the home overlay
        // still mounted before it.
        let sys = RecordingSyscall::default();
        let ahead = Ahead {
            overlay: Some((Path::new("/home/u/ws"), 4)),
            ..Ahead::default()
        };
        enter_mirror(&sys, &plan(), -1, ahead).expect("recording never fails");
        let calls = sys.calls();
        assert_eq!(calls[mounted], Call::AttachTree(ws.to_path_buf()));
        assert_eq!(calls[..mounted], fresh[..mounted]);
        assert_eq!(calls[mounted + 1..], fresh[mounted + 1..]);
        assert!(matches!(&calls[mounted - 1], Call::Mount { target, .. } if target == home));
        // Made for another path: every overlay mounted as without it.
        let sys = RecordingSyscall::default();
        let ahead = Ahead {
            overlay: Some((Path::new("/home/u/other"), 4)),
            ..Ahead::default()
        };
        enter_mirror(&sys, &plan(), -1, ahead).expect("recording never fails");
        assert_eq!(sys.calls(), fresh);
    }

    /// Needs root and Linux 6.15 or later (binding into a detached tree), as this project's
    /// development and CI machines have.
    #[test]
    fn a_dev_built_ahead_holds_the_hosts_devices_and_is_in_no_mount_table() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let tree = prepare_dev().expect("a /dev built ahead (root, Linux 6.15 or later)");
        let root = PathBuf::from(format!("/proc/self/fd/{}", tree.as_raw_fd()));
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .expect("list the tree")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut expected: Vec<&str> = DEVICES
            .iter()
            .chain(DEV_LINKS.iter().map(|(l, _)| l))
            .chain(["shm"].iter())
            .copied()
            .collect();
        expected.sort();
        assert_eq!(names, expected);
        for name in DEVICES {
            let ours = std::fs::metadata(root.join(name)).expect("device");
            let host = std::fs::metadata(Path::new("/dev").join(name)).expect("host device");
            assert!(ours.file_type().is_char_device(), "{name}");
            assert_eq!(ours.rdev(), host.rdev(), "{name}");
        }
        for (link, to) in DEV_LINKS {
            assert_eq!(
                std::fs::read_link(root.join(link)).expect("link"),
                Path::new(to)
            );
        }
        assert!(std::fs::symlink_metadata(root.join("shm"))
            .expect("shm")
            .is_dir());
        // Detached: its file system is mounted nowhere a process could reach it.
        let dev = std::fs::metadata(&root).expect("tree").dev();
        let id = format!(
            "{}:{}",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev)
        );
        let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(
            !table
                .lines()
                .any(|l| l.split(' ').nth(2) == Some(id.as_str())),
            "{id} is attached: {table}"
        );
    }

    /// A mask whose path is gone when it is mounted is skipped, and counted: a mirror built
    /// ahead with one is not offered (`init::init_main`).
    #[test]
    fn a_mask_whose_path_is_gone_is_counted() {
        let sys = RecordingSyscall::default();
        let gone = enter_mirror(&sys, &plan(), -1, Ahead::default()).expect("recording");
        assert_eq!(gone, 0);
        let mut sys = RecordingSyscall::default();
        sys.gone = vec![PathBuf::from("/s/run1/root/home/u/cmdgate.sock")];
        let gone = enter_mirror(&sys, &plan(), -1, Ahead::default()).expect("recording");
        assert_eq!(gone, 1);
        // Under the fresh scratch /tmp: missing as expected, not counted.
        let mut p = plan();
        p.masks.push(Mask {
            path: PathBuf::from("/tmp/cmdgate.sock"),
            dir: false,
            entries: Vec::new(),
        });
        let mut sys = RecordingSyscall::default();
        sys.gone = vec![PathBuf::from("/s/run1/root/tmp/cmdgate.sock")];
        let gone = enter_mirror(&sys, &p, -1, Ahead::default()).expect("recording");
        assert_eq!(gone, 0);
    }

    #[test]
    fn overlay_paths_with_separators_are_refused() {
        let sys = RecordingSyscall::default();
        let mut p = plan();
        p.overlays[1].target = PathBuf::from("/home/u/a,b");
        assert!(matches!(
            enter_mirror(&sys, &p, -1, Ahead::default()),
            Err(SetupError::UnsupportedPath(_))
        ));
    }
}

//! The narrow kernel interface the mirror setup uses, with a real and a recording implementation.
//!
//! Only the calls whose ORDER matters for isolation (unshare before mount, private propagation
//! before binds, pivot_root before detaching the old root) go through this trait, so the order is
//! unit-tested without root (the youki `Syscall` pattern). Everything else calls libc directly.

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use std::cell::RefCell;
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `mount_setattr(2)` attribute bits (linux/mount.h).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// Ignore suid and sgid bits.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// Disallow access to device special files.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
/// Disallow program execution.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `move_mount(2)`: the source is the fd itself (linux/mount.h).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// `open_tree(2)`: a detached copy instead of the mount itself (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 0x1;

/// `fsopen(2)`/`fsmount(2)`: close-on-exec (linux/mount.h).
const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
/// `fsconfig(2)` commands (linux/mount.h).
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_SET_FD: libc::c_uint = 5;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// `setpriority(PRIO_PROCESS, 0, nice)`: the calling thread's nice value (Linux keeps one per
/// thread). Raising it needs no privilege; lowering it again does (`RLIMIT_NICE` or
/// `CAP_SYS_NICE`), so a thread that takes a higher one keeps it.
pub fn nice_this_thread(nice: i32) -> Result<(), Errno> {
    // SAFETY: integer arguments only; `who` 0 is the calling thread.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    Errno::result(rc).map(drop)
}

/// A detached copy of the mount tree at `path`, every submount included (`open_tree(2)` with
/// `OPEN_TREE_CLONE | AT_RECURSIVE`), close-on-exec. It shows the mounts as they are now: mounts
/// made later (the run's scratch tmpfs) are not in it, so nothing has to be unmounted from it.
/// Closing the last fd of a tree that was never attached unmounts it.
pub fn clone_tree(path: &Path) -> Result<OwnedFd, Errno> {
    clone_mount(path, true)
}

/// A detached copy of the mount at `path` (with its submounts when `recursive`): what a bind
/// mount of `path` would attach (`open_tree(2)` with `OPEN_TREE_CLONE`), close-on-exec.
pub fn clone_mount(path: &Path, recursive: bool) -> Result<OwnedFd, Errno> {
    let path = cpath(path)?;
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// One `fsconfig(2)` parameter of a new file system ([`new_fs`]).
#[derive(Clone, Copy, Debug)]
pub enum FsParam<'a> {
    /// `key=value`.
    Str(&'a str, &'a str),
    /// A flag (`key`).
    Flag(&'a str),
    /// `key` naming the directory an fd of the caller's refers to (an overlay layer: exactly
    /// the inode opened, whatever its path names later).
    Fd(&'a str, RawFd),
}

/// A new file system of type `fstype` (`fsopen` + `fsconfig` + `fsmount`) with `params` and the
/// mount attributes `attr` (`MOUNT_ATTR_*`), as a detached mount attached nowhere:
/// close-on-exec, and unmounted when its last fd closes unless it was attached
/// ([`Syscall::attach_tree`]).
pub fn new_fs(fstype: &str, params: &[FsParam<'_>], attr: u64) -> Result<OwnedFd, Errno> {
    let owned = |fd: libc::c_long| -> Result<OwnedFd, Errno> {
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: the syscall returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    };
    let fstype = CString::new(fstype).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a NUL-terminated string that outlives the call and an integer flag.
    let ctx = owned(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    let ctx_fd = std::os::fd::AsRawFd::as_raw_fd(&ctx);
    let config = |cmd: libc::c_uint, key: Option<&CString>, value: Option<&CString>, aux: i32| {
        let ptr = |c: Option<&CString>| c.map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: `ctx` is our fs context fd; key and value are NUL-terminated strings (or
        // NULL, as the command expects) that outlive the call; the kernel only reads them.
        let rc =
            unsafe { libc::syscall(libc::SYS_fsconfig, ctx_fd, cmd, ptr(key), ptr(value), aux) };
        if rc < 0 {
            Err(Errno::last())
        } else {
            Ok(())
        }
    };
    let c = |s: &str| CString::new(s).map_err(|_| Errno::EINVAL);
    for param in params {
        match *param {
            FsParam::Str(key, value) => {
                config(FSCONFIG_SET_STRING, Some(&c(key)?), Some(&c(value)?), 0)?
            }
            FsParam::Flag(key) => config(FSCONFIG_SET_FLAG, Some(&c(key)?), None, 0)?,
            FsParam::Fd(key, fd) => config(FSCONFIG_SET_FD, Some(&c(key)?), None, fd)?,
        }
    }
    config(FSCONFIG_CMD_CREATE, None, None, 0)?;
    // SAFETY: integer arguments only; `ctx` is a created fs context of ours.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, ctx_fd, FSMOUNT_CLOEXEC, attr) })
}

/// `move_mount(tree, "", dir, name, MOVE_MOUNT_F_EMPTY_PATH)`: attach the detached `tree` at
/// `name` below the directory fd `dir` — also when `dir` is itself in a detached tree (Linux
/// 6.15 and later; earlier kernels refuse with `EINVAL`).
pub fn attach_below(tree: RawFd, dir: RawFd, name: &Path) -> Result<(), Errno> {
    let name = cpath(name)?;
    // SAFETY: integer fds of the caller's and NUL-terminated strings that outlive the call; the
    // kernel only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            dir,
            name.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Kernel calls made while building the mirror's mount namespace.
pub trait Syscall {
    /// `unshare(2)`.
    fn unshare(&self, flags: CloneFlags) -> Result<(), Errno>;
    /// `mount(2)`.
    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno>;
    /// `mount_setattr(2)` setting `attr` on `target` (and below it when `recursive`).
    fn mount_setattr(&self, target: &Path, attr: u64, recursive: bool) -> Result<(), Errno>;
    /// `umount2(target, MNT_DETACH)`.
    fn umount_detach(&self, target: &Path) -> Result<(), Errno>;
    /// `move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`: attach a detached
    /// mount tree (from [`clone_tree`]) at `target`.
    fn attach_tree(&self, tree: RawFd, target: &Path) -> Result<(), Errno>;
    /// `pivot_root(2)`.
    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> Result<(), Errno>;
    /// `chdir(2)`.
    fn chdir(&self, path: &Path) -> Result<(), Errno>;
    /// Create an empty regular file (a bind-mount target for a device node).
    fn create_file(&self, path: &Path) -> Result<(), Errno>;
    /// `mkdir(2)`.
    fn mkdir(&self, path: &Path, mode: u32) -> Result<(), Errno>;
    /// `symlink(2)`: `link` points at `target`.
    fn symlink(&self, target: &Path, link: &Path) -> Result<(), Errno>;
    /// `sethostname(2)`.
    fn sethostname(&self, name: &str) -> Result<(), Errno>;
    /// `setns(fd, kind)`: enter the namespace of that one kind (network, IPC, UTS) the fd names.
    fn enter_ns(&self, fd: RawFd, kind: CloneFlags) -> Result<(), Errno>;
}

/// The real kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealSyscall;

/// `struct mount_attr` from linux/mount.h (not in every libc version).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cpath(path: &Path) -> Result<CString, Errno> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

impl Syscall for RealSyscall {
    fn unshare(&self, flags: CloneFlags) -> Result<(), Errno> {
        nix::sched::unshare(flags)
    }

    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        nix::mount::mount(source, target, fstype, flags, data)
    }

    fn mount_setattr(&self, target: &Path, attr: u64, recursive: bool) -> Result<(), Errno> {
        let target = cpath(target)?;
        let attr = MountAttr {
            attr_set: attr,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
        // SAFETY: `target` is a NUL-terminated string and `attr` a properly sized, initialised
        // `struct mount_attr` that both outlive the call; the kernel only reads them.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                target.as_ptr(),
                flags,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }

    fn umount_detach(&self, target: &Path) -> Result<(), Errno> {
        nix::mount::umount2(target, MntFlags::MNT_DETACH)
    }

    fn attach_tree(&self, tree: RawFd, target: &Path) -> Result<(), Errno> {
        let target = cpath(target)?;
        // SAFETY: `tree` is an fd of ours, the paths are NUL-terminated strings that outlive the
        // call; the kernel only reads them.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }

    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> Result<(), Errno> {
        nix::unistd::pivot_root(new_root, put_old)
    }

    fn chdir(&self, path: &Path) -> Result<(), Errno> {
        nix::unistd::chdir(path)
    }

    fn create_file(&self, path: &Path) -> Result<(), Errno> {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map(drop)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn mkdir(&self, path: &Path, mode: u32) -> Result<(), Errno> {
        nix::unistd::mkdir(path, nix::sys::stat::Mode::from_bits_truncate(mode))
    }

    fn symlink(&self, target: &Path, link: &Path) -> Result<(), Errno> {
        std::os::unix::fs::symlink(target, link)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn sethostname(&self, name: &str) -> Result<(), Errno> {
        nix::unistd::sethostname(name)
    }

    fn enter_ns(&self, fd: RawFd, kind: CloneFlags) -> Result<(), Errno> {
        // SAFETY: integer arguments only; the caller keeps the fd open for the call.
        if unsafe { libc::setns(fd, kind.bits()) } < 0 {
            return Err(Errno::last());
        }
        Ok(())
    }
}

/// One recorded kernel call (for the order test).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `unshare(flags)`.
    Unshare(CloneFlags),
    /// `mount(source, target, fstype, flags, data)`.
    Mount {
        /// Source path.
        source: Option<PathBuf>,
        /// Mount point.
        target: PathBuf,
        /// Filesystem type.
        fstype: Option<String>,
        /// Flags.
        flags: MsFlags,
        /// Options string.
        data: Option<String>,
    },
    /// `mount_setattr(target, attr, recursive)`.
    SetAttr(PathBuf, u64, bool),
    /// `umount2(target, MNT_DETACH)`.
    Detach(PathBuf),
    /// `move_mount` of a detached tree onto the path.
    AttachTree(PathBuf),
    /// `pivot_root(new, old)`.
    PivotRoot(PathBuf, PathBuf),
    /// `chdir(path)`.
    Chdir(PathBuf),
    /// create an empty file.
    CreateFile(PathBuf),
    /// `mkdir(path)`.
    Mkdir(PathBuf),
    /// `symlink(target, link)`.
    Symlink(PathBuf, PathBuf),
    /// `sethostname(name)`.
    Hostname(String),
    /// `setns(fd, kind)`.
    EnterNs(CloneFlags),
}

/// Records every call and succeeds (but a mount on a path of `gone`: `ENOENT`, as for a path
/// removed meanwhile); used only by the setup-order unit tests.
#[derive(Debug, Default)]
pub struct RecordingSyscall {
    calls: RefCell<Vec<Call>>,
    /// Mount targets that fail with `ENOENT`.
    pub gone: Vec<std::path::PathBuf>,
}

impl RecordingSyscall {
    /// The calls made so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    fn push(&self, call: Call) -> Result<(), Errno> {
        self.calls.borrow_mut().push(call);
        Ok(())
    }
}

impl Syscall for RecordingSyscall {
    fn unshare(&self, flags: CloneFlags) -> Result<(), Errno> {
        self.push(Call::Unshare(flags))
    }

    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        if self.gone.iter().any(|g| g == target) {
            return Err(Errno::ENOENT);
        }
        self.push(Call::Mount {
            source: source.map(Path::to_path_buf),
            target: target.to_path_buf(),
            fstype: fstype.map(str::to_string),
            flags,
            data: data.map(str::to_string),
        })
    }

    fn mount_setattr(&self, target: &Path, attr: u64, recursive: bool) -> Result<(), Errno> {
        self.push(Call::SetAttr(target.to_path_buf(), attr, recursive))
    }

    fn umount_detach(&self, target: &Path) -> Result<(), Errno> {
        self.push(Call::Detach(target.to_path_buf()))
    }

    fn attach_tree(&self, _tree: RawFd, target: &Path) -> Result<(), Errno> {
        self.push(Call::AttachTree(target.to_path_buf()))
    }

    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> Result<(), Errno> {
        self.push(Call::PivotRoot(
            new_root.to_path_buf(),
            put_old.to_path_buf(),
        ))
    }

    fn chdir(&self, path: &Path) -> Result<(), Errno> {
        self.push(Call::Chdir(path.to_path_buf()))
    }

    fn create_file(&self, path: &Path) -> Result<(), Errno> {
        self.push(Call::CreateFile(path.to_path_buf()))
    }

    fn mkdir(&self, path: &Path, _mode: u32) -> Result<(), Errno> {
        self.push(Call::Mkdir(path.to_path_buf()))
    }

    fn symlink(&self, target: &Path, link: &Path) -> Result<(), Errno> {
        self.push(Call::Symlink(target.to_path_buf(), link.to_path_buf()))
    }

    fn sethostname(&self, name: &str) -> Result<(), Errno> {
        self.push(Call::Hostname(name.to_string()))
    }

    fn enter_ns(&self, _fd: RawFd, kind: CloneFlags) -> Result<(), Errno> {
        self.push(Call::EnterNs(kind))
    }
}

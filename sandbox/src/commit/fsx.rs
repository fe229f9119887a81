//! Descriptor-relative filesystem steps for the commit: every host path is reached one component
//! at a time from the workspace's fd with `O_NOFOLLOW`, so a symlink planted on the host (or a
//! directory swapped for one) is never followed; entries move with `renameat2(RENAME_NOREPLACE)`.

use nix::errno::Errno;
use nix::fcntl::{OFlag, RenameFlags};
use nix::sys::stat::{FileStat, Mode};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

/// Open a directory (never through a symlink).
pub fn open_dir_at<Fd: AsFd>(dir: Fd, name: &OsStr) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Open an absolute directory path (the workspace, the upper dir) as the walk's anchor.
pub fn open_root(path: &Path) -> Result<OwnedFd, Errno> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Open a host tree's root (the workspace, a kept `write=` path: canonical absolute paths) from
/// `/` one component at a time, never following a symlink: a directory on the way swapped for a
/// link (`~/.cargo` → `/etc`) after the run is refused (ELOOP/ENOTDIR), not written through.
pub fn open_host_root(path: &Path) -> Result<OwnedFd, Errno> {
    if !path.is_absolute() {
        return Err(Errno::EINVAL);
    }
    let root = open_root(Path::new("/"))?;
    open_beneath(&root, path.strip_prefix("/").map_err(|_| Errno::EINVAL)?)
}

/// Open the directory `rel` below `root` one component at a time, never following a symlink.
pub fn open_beneath(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, Errno> {
    let mut fd = root
        .try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    for c in rel.components() {
        match c {
            Component::Normal(name) => fd = open_dir_at(&fd, name)?,
            Component::CurDir => {}
            _ => return Err(Errno::EINVAL), // no `..`, no absolute parts
        }
    }
    Ok(fd)
}

/// `lstat` relative to a directory fd; `None` when the name does not exist.
pub fn lstat_at<Fd: AsFd>(dir: Fd, name: &OsStr) -> Result<Option<FileStat>, Errno> {
    match nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Move `from_dir/from` to `to_dir/to`, failing with EEXIST if `to` exists (atomic).
pub fn move_noreplace<A: AsFd, B: AsFd>(
    from_dir: A,
    from: &OsStr,
    to_dir: B,
    to: &OsStr,
) -> Result<(), Errno> {
    nix::fcntl::renameat2(from_dir, from, to_dir, to, RenameFlags::RENAME_NOREPLACE)
}

/// Change a directory's permission bits (opened without following symlinks).
pub fn chmod_dir_at<Fd: AsFd>(dir: Fd, name: &OsStr, mode: u32) -> Result<(), Errno> {
    let fd = open_dir_at(dir, name)?;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode & 0o7777))
}

/// Flush the whole filesystem holding `fd` (one call instead of an fsync per file).
pub fn syncfs(fd: &OwnedFd) -> Result<(), Errno> {
    nix::unistd::syncfs(fd)
}

/// `(sec, nsec)` ctime of a stat.
pub fn ctime(st: &FileStat) -> [i64; 2] {
    [st.st_ctime, st.st_ctime_nsec]
}

/// The file type bits of a stat.
pub fn kind(st: &FileStat) -> u32 {
    st.st_mode & libc::S_IFMT
}

/// The value of extended attribute `name` on `path` (no symlink follow), if set.
pub fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let cpath = CString::new(path.as_os_str().as_bytes()).ok()?;
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated and outlive the call; `buf` is writable for the
    // length passed.
    let n = unsafe {
        libc::lgetxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

/// `listxattrat(2)` (Linux 6.13; the same number on every architecture, as all syscalls since
/// 5.1 have).
const SYS_LISTXATTRAT: libc::c_long = 465;

/// Whether `listxattrat` answered ENOSYS once (an older kernel): the path form from then on.
static NO_LISTXATTRAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The extended attribute names of entry `name` in the directory open at `dir` (no symlink
/// follow), NUL-separated in `buf` (its contents replaced), without a path walk:
/// `listxattrat(dir, name, AT_SYMLINK_NOFOLLOW)`; on a kernel without it, `llistxattr` of
/// `path()`. A filesystem without extended attributes has none (empty); any other error is an
/// error (the caller refuses: markers it cannot read are not markers it may ignore).
pub fn xattr_list_at(
    dir: &OwnedFd,
    name: &OsStr,
    path: impl Fn() -> std::path::PathBuf,
    buf: &mut Vec<u8>,
) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    let cname = CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
    let cpath = if NO_LISTXATTRAT.load(Ordering::Relaxed) {
        Some(CString::new(path().into_os_string().into_vec()).map_err(|_| Errno::EINVAL)?)
    } else {
        None
    };
    if buf.len() < 256 {
        buf.resize(256, 0);
    }
    loop {
        let n = match &cpath {
            // SAFETY: `cname` is NUL-terminated and outlives the call; `buf` is writable for the
            // length passed; `dir` is an open descriptor.
            None => unsafe {
                libc::syscall(
                    SYS_LISTXATTRAT,
                    dir.as_raw_fd(),
                    cname.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            },
            // SAFETY: as above, with the NUL-terminated path.
            Some(p) => unsafe {
                libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) as libc::c_long
            },
        };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(());
        }
        match Errno::last() {
            Errno::ENOSYS if cpath.is_none() => {
                NO_LISTXATTRAT.store(true, Ordering::Relaxed);
                return xattr_list_at(dir, name, path, buf);
            }
            Errno::ERANGE if buf.len() < 1 << 20 => {
                let len = buf.len() * 4;
                buf.resize(len, 0);
            }
            Errno::ENOTSUP => {
                buf.clear();
                return Ok(());
            }
            e => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(dir: &OwnedFd, name: &str, path: &Path) -> Vec<Vec<u8>> {
        let mut buf = Vec::new();
        xattr_list_at(dir, OsStr::new(name), || path.join(name), &mut buf).expect("list");
        buf.split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn xattr_lists_come_from_the_dir_fd_never_through_a_symlink_in_both_forms() {
        let tmp = tempfile::tempdir().unwrap();
        let (f, l) = (tmp.path().join("f"), tmp.path().join("l"));
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::symlink(&f, &l).unwrap();
        let (cf, cn) = (
            CString::new(f.as_os_str().as_bytes()).unwrap(),
            CString::new("user.marker").unwrap(),
        );
        // SAFETY: NUL-terminated strings and a one-byte value, all alive for the call.
        let set = unsafe { libc::setxattr(cf.as_ptr(), cn.as_ptr(), b"y".as_ptr().cast(), 1, 0) };
        assert_eq!(set, 0, "{}", Errno::last());
        let dir = open_root(tmp.path()).unwrap();
        // The kernel's `listxattrat`, then (as on a kernel before 6.13) the path form.
        for fallback in [false, true] {
            if fallback {
                NO_LISTXATTRAT.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            assert!(listed(&dir, "f", tmp.path()).contains(&b"user.marker".to_vec()));
            // The link's own (none), not its target's.
            assert!(!listed(&dir, "l", tmp.path()).contains(&b"user.marker".to_vec()));
        }
        let mut buf = Vec::new();
        let gone = xattr_list_at(
            &dir,
            OsStr::new("gone"),
            || tmp.path().join("gone"),
            &mut buf,
        );
        assert_eq!(gone, Err(Errno::ENOENT));
    }
}

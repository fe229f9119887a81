//! Opens of masked paths, seen (issue 14: "an attempt to open a masked path is an effect the
//! audit names").
//!
//! Every mask is its own mount inside the mirror (an empty read-only tmpfs over a directory,
//! `/dev/null` bound over anything else; `setup` step 6b). The run's pid 1 — root in the initial
//! user namespace, outside the command's confinement — puts a fanotify mount mark (`FAN_OPEN`,
//! directories included) on each of those mounts after the mirror is built, and drains the queue
//! once the command's whole pid namespace is gone. An open through a mask mount is queued by the
//! kernel before the `open` returns, so nothing the command did is missed; the event's file
//! descriptor names the path (`/proc/self/fd`), and is closed at once.
//!
//! What is seen: opening a masked file (it reads as empty), opening a masked directory (a
//! listing), and opening a name inside a masked directory that existed on the host — the mask of
//! a directory carries an empty placeholder for each of the host directory's entries (names only,
//! at most [`PLACEHOLDERS`], one level; setup step 6b). Not seen: a lookup that finds nothing (a
//! name the host directory does not have, or below the first level), `stat`/`access` without an
//! open, and opens past the kernel's queue (16,384 events; reported as an overflow).

use crate::model::Effect;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Placeholders per masked directory (names of the host directory's entries).
pub const PLACEHOLDERS: usize = 256;
/// Distinct paths reported per run; more are counted in one effect.
const MAX_REPORTED: usize = 64;

/// A fanotify group watching the mask mounts.
pub struct MaskWatch {
    fd: OwnedFd,
}

impl std::os::fd::AsFd for MaskWatch {
    /// The group's fd (pid 1 hands a reference to the helper, `helper::Held`).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl MaskWatch {
    /// Marks the mount of each path in `masks` (paths as the mirror shows them: after the pivot,
    /// the masked host paths themselves). `None` when there are none or fanotify is unavailable
    /// (the masks still hide the data; only the report is lost).
    pub fn new(masks: &[(&Path, bool)]) -> Option<MaskWatch> {
        if masks.is_empty() {
            return None;
        }
        // SAFETY: integer arguments only.
        let raw = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK,
                (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32,
            )
        };
        if raw < 0 {
            return None;
        }
        // SAFETY: fanotify_init returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut marked = 0;
        for (path, dir) in masks {
            let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
                continue;
            };
            let events = libc::FAN_OPEN | if *dir { libc::FAN_ONDIR } else { 0 };
            // SAFETY: `c` is NUL-terminated and outlives the call; the fd is ours.
            let rc = unsafe {
                libc::fanotify_mark(
                    fd.as_raw_fd(),
                    libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
                    events,
                    libc::AT_FDCWD,
                    c.as_ptr(),
                )
            };
            if rc == 0 {
                marked += 1;
            }
        }
        (marked > 0).then_some(MaskWatch { fd })
    }

    /// Reads every queued event: the distinct paths opened, as effects (call once the command's
    /// processes are gone).
    pub fn drain(&self) -> Vec<Effect> {
        let mut seen = BTreeSet::new();
        let mut extra = 0usize;
        let mut overflow = false;
        let size = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut buf = vec![0u8; 64 * size];
        loop {
            // SAFETY: `buf` is writable for its length; the fd is ours.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let n = n as usize;
            let mut off = 0;
            while off + size <= n {
                // SAFETY: `off + size <= n` bytes were written by the kernel; the struct is plain
                // old data, read unaligned.
                let meta: libc::fanotify_event_metadata =
                    unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                if meta.vers != libc::FANOTIFY_METADATA_VERSION || (meta.event_len as usize) < size
                {
                    break;
                }
                if meta.mask & libc::FAN_Q_OVERFLOW != 0 {
                    overflow = true;
                }
                if meta.fd >= 0 {
                    // SAFETY: the kernel installed this fd for us; we own and close it.
                    let file = unsafe { OwnedFd::from_raw_fd(meta.fd) };
                    if let Ok(path) =
                        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
                    {
                        if seen.len() < MAX_REPORTED {
                            seen.insert(path);
                        } else if !seen.contains(&path) {
                            extra += 1;
                        }
                    }
                }
                off += meta.event_len as usize;
            }
        }
        let mut out: Vec<Effect> = seen
            .into_iter()
            .map(|path| Effect::MaskedOpen { path })
            .collect();
        if extra > 0 || overflow {
            out.push(Effect::MaskedOpen {
                path: PathBuf::from(format!(
                    "(and {extra} more{})",
                    if overflow {
                        "; the kernel's queue overflowed"
                    } else {
                        ""
                    }
                )),
            });
        }
        out
    }
}

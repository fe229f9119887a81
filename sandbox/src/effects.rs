//! The effects diff: read an overlay upper dir against its lower tree and say what changed.
//!
//! overlayfs records a run's changes in the upper dir: a whiteout (char device 0/0) is a deletion,
//! a directory with `trusted.overlay.opaque=y` replaced the lower directory, a file that also exists
//! below was copied up (modified, or only its metadata), anything else is new. Renames have no
//! record of their own (redirect_dir=off): a deletion and a creation with the same bytes are paired.

use crate::model::{Area, Effect, FileKind};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One tree to diff: `upper` holds the changes to the lower tree at `lower`.
#[derive(Clone, Debug)]
pub struct Layer<'a> {
    /// Which tree (how paths are reported).
    pub area: Area,
    /// The overlay upper dir (after the run).
    pub upper: &'a Path,
    /// The real tree; `None` for scratch dirs with no lower (everything in them is new).
    pub lower: Option<&'a Path>,
    /// Prefix for reported paths (`/tmp` for scratch, empty for workspace/home).
    pub prefix: &'a Path,
    /// Reported paths the helper created itself (mount points of overlays under /tmp): not effects.
    pub premade: &'a [PathBuf],
}

fn kind_of(meta: &Metadata) -> FileKind {
    let ft = meta.file_type();
    if ft.is_file() {
        FileKind::File
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::Other
    }
}

fn is_whiteout(meta: &Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Whether an upper dir is opaque (hides the lower dir's entries).
fn is_opaque(path: &Path) -> bool {
    let Ok(cpath) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // trusted.* when mounted by real root; user.* when mounted with `userxattr` in a user namespace.
    for name in [c"trusted.overlay.opaque", c"user.overlay.opaque"] {
        let mut value = [0u8; 4];
        // SAFETY: both strings are NUL-terminated and live across the call; `value` is a writable
        // buffer whose length is passed, so the kernel writes at most that many bytes.
        let n = unsafe {
            libc::lgetxattr(
                cpath.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if n >= 1 && value[0] == b'y' {
            return true;
        }
    }
    false
}

/// Entries looked at when sizing a deleted directory (the size is a lower bound past it).
const SIZE_WALK_LIMIT: usize = 10_000;

/// Bytes in the regular files below `dir` (bounded walk: `rm -rf node_modules` must not cost
/// a full tree walk).
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut seen = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > SIZE_WALK_LIMIT {
                return total;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

fn same_content(a: &Path, b: &Path) -> bool {
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let mut ba = vec![0u8; 64 << 10];
    let mut bb = vec![0u8; 64 << 10];
    loop {
        let na = match read_full(&mut fa, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut fb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn hash(path: &Path) -> Option<[u8; 32]> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match f.read(&mut buf).ok()? {
            0 => break,
            n => h.update(&buf[..n]),
        }
    }
    Some(h.finalize().into())
}

/// Diff every layer and pair renames; effects come out in a stable (path) order per layer.
pub fn diff(layers: &[Layer<'_>]) -> Vec<Effect> {
    let mut out = Vec::new();
    for layer in layers {
        let start = out.len();
        walk(layer, Path::new(""), layer.lower.is_some(), &mut out);
        pair_renames(layer, &mut out, start);
    }
    out
}

fn walk(layer: &Layer<'_>, rel: &Path, lower_visible: bool, out: &mut Vec<Effect>) {
    let dir = layer.upper.join(rel);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let upper = layer.upper.join(&rel);
        let Ok(um) = std::fs::symlink_metadata(&upper) else {
            continue;
        };
        let path = layer.prefix.join(&rel);
        let area = layer.area;
        let lower_path = layer.lower.filter(|_| lower_visible).map(|l| l.join(&rel));
        let lm = lower_path
            .as_ref()
            .and_then(|l| std::fs::symlink_metadata(l).ok());
        if is_whiteout(&um) {
            if let Some(lm) = lm {
                let size = match (lm.is_dir(), &lower_path) {
                    (true, Some(l)) => tree_size(l),
                    _ if lm.is_file() => lm.len(),
                    _ => 0,
                };
                out.push(Effect::Deleted {
                    area,
                    path,
                    kind: kind_of(&lm),
                    size,
                });
            }
            continue;
        }
        let kind = kind_of(&um);
        match (&lm, kind) {
            (None, _) => {
                if !layer.premade.contains(&path) {
                    out.push(Effect::Created {
                        area,
                        path,
                        kind,
                        size: if um.is_file() { um.len() } else { 0 },
                    });
                }
                if kind == FileKind::Dir {
                    walk(layer, &rel, false, out);
                }
            }
            (Some(lm), FileKind::Dir) if lm.is_dir() => {
                if is_opaque(&upper) {
                    out.push(Effect::ReplacedDir { area, path });
                    walk(layer, &rel, false, out);
                } else {
                    push_metadata(out, area, path, lm, &um);
                    walk(layer, &rel, true, out);
                }
            }
            (Some(lm), _) if kind_of(lm) != kind => {
                out.push(Effect::Replaced {
                    area,
                    path,
                    old: kind_of(lm),
                    new: kind,
                });
                if kind == FileKind::Dir {
                    walk(layer, &rel, false, out);
                }
            }
            (Some(lm), FileKind::File) => {
                let lower = lower_path.as_deref().unwrap_or(Path::new("/"));
                if lm.len() != um.len() || !same_content(lower, &upper) {
                    out.push(Effect::Modified {
                        area,
                        path,
                        old_size: lm.len(),
                        new_size: um.len(),
                    });
                } else {
                    push_metadata(out, area, path, lm, &um);
                }
            }
            (Some(_), FileKind::Symlink) => {
                let lower = lower_path.as_deref().unwrap_or(Path::new("/"));
                if std::fs::read_link(lower).ok() != std::fs::read_link(&upper).ok() {
                    out.push(Effect::Modified {
                        area,
                        path,
                        old_size: 0,
                        new_size: 0,
                    });
                }
            }
            (Some(lm), _) => push_metadata(out, area, path, lm, &um),
        }
    }
}

/// Copied up with identical bytes: report it only if mode or owner changed (a bare `touch` or an
/// open for writing without a write is not an effect).
fn push_metadata(out: &mut Vec<Effect>, area: Area, path: PathBuf, lm: &Metadata, um: &Metadata) {
    let (old_mode, new_mode) = (
        lm.permissions().mode() & 0o7777,
        um.permissions().mode() & 0o7777,
    );
    if old_mode != new_mode || lm.uid() != um.uid() || lm.gid() != um.gid() {
        out.push(Effect::MetadataChanged {
            area,
            path,
            old_mode,
            new_mode,
        });
    }
}

/// Pair deletions with creations of identical files (same size, same SHA-256) into renames.
fn pair_renames(layer: &Layer<'_>, out: &mut Vec<Effect>, start: usize) {
    let Some(lower) = layer.lower else {
        return;
    };
    // Created files by size: the only candidates worth hashing.
    let mut created_by_size: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, e) in out.iter().enumerate().skip(start) {
        if let Effect::Created {
            kind: FileKind::File,
            size,
            ..
        } = e
        {
            created_by_size.entry(*size).or_default().push(i);
        }
    }
    if created_by_size.is_empty() {
        return;
    }
    let mut created_hash: HashMap<usize, Option<[u8; 32]>> = HashMap::new();
    let mut renames: Vec<(usize, usize)> = Vec::new();
    for (i, e) in out.iter().enumerate().skip(start) {
        let Effect::Deleted {
            kind: FileKind::File,
            size,
            path,
            ..
        } = e
        else {
            continue;
        };
        let Some(candidates) = created_by_size.get_mut(size) else {
            continue;
        };
        let rel = path.strip_prefix(layer.prefix).unwrap_or(path);
        let Some(old) = hash(&lower.join(rel)) else {
            continue;
        };
        let found = candidates.iter().position(|&c| {
            let h = created_hash.entry(c).or_insert_with(|| {
                let Effect::Created { path, .. } = &out[c] else {
                    return None;
                };
                let rel = path.strip_prefix(layer.prefix).unwrap_or(path);
                hash(&layer.upper.join(rel))
            });
            *h == Some(old)
        });
        if let Some(pos) = found {
            renames.push((i, candidates.swap_remove(pos)));
        }
    }
    if renames.is_empty() {
        return;
    }
    let mut drop = vec![false; out.len()];
    for &(del, cre) in &renames {
        if let (
            Effect::Deleted {
                path: from, size, ..
            },
            Effect::Created { path: to, .. },
        ) = (&out[del], &out[cre])
        {
            let renamed = Effect::Renamed {
                area: layer.area,
                from: from.clone(),
                to: to.clone(),
                size: *size,
            };
            out[cre] = renamed;
            drop[del] = true;
        }
    }
    let mut i = 0;
    out.retain(|_| {
        let keep = !drop[i];
        i += 1;
        keep
    });
}

//! A `PathResolver` for one hook call that asks the kernel about each path at most once. The
//! catastrophic check, cmdgate's own paths and every word of the command walk the same prefixes
//! (`/home`, `/home/me`, the project …): about a hundred `lstat`s for `ls -la`, most of them
//! repeats. What it remembers is never older than the call itself, and the command runs after the
//! answer anyway; the daemon, which runs for days, remembers lookups for one judgement only
//! (`daemon/src/engine/memo.rs`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;

use cmdgate_policy::decide::kernel::{PathResolver, Resolution};

/// One `lstat`'s answer, kept: the metadata, or the error (an OS error by its number, so a hit
/// neither formats nor allocates; anything else by its kind and text). The metadata is boxed: a
/// `Metadata` is ~150 bytes, and in the map's slots (a table of twice the entries, filled at
/// hashed places, and left behind when it grows) it cost the compound read ~30 KB of the hook's
/// arena, each new page a fault; boxed, the slots are 56 bytes and the boxes lie side by side.
#[derive(Clone)]
enum Kept {
    Meta(Box<Metadata>),
    Os(i32),
    Other(io::ErrorKind, String),
}

/// A multiply-and-rotate hash over 8-byte words (FxHash's step): the keys are a few dozen paths
/// of one call, so SipHash's flooding resistance buys nothing here (the worst an agent's command
/// can do is make ~100 lookups slower), and it costs more than the lookup itself; a byte at a time
/// (FNV-1a) was still ~4 instructions per byte of every prefix looked up.
#[derive(Default)]
struct WordHash(u64);

impl Hasher for WordHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        self.0 = h;
    }
}

/// `lstat` results of one call, by path.
pub struct Memo {
    seen: RefCell<HashMap<String, Kept, BuildHasherDefault<WordHash>>>,
}

impl Default for Memo {
    /// Sized for the walks of a compound command (`ls -la` looks up ~25 paths, the
    /// 400-character compound read of the benchmarks ~60, each once): no rehash on the way (four
    /// of them cost ~5 k instructions of a fast-path read, and each left its old table behind).
    fn default() -> Memo {
        Memo {
            seen: RefCell::new(HashMap::with_capacity_and_hasher(
                64,
                BuildHasherDefault::default(),
            )),
        }
    }
}

impl Memo {
    fn lstat(&self, path: &str) -> io::Result<Metadata> {
        if let Some(hit) = self.seen.borrow().get(path) {
            return match hit {
                Kept::Meta(m) => Ok(Metadata::clone(m)),
                Kept::Os(code) => Err(io::Error::from_raw_os_error(*code)),
                Kept::Other(kind, what) => Err(io::Error::new(*kind, what.clone())),
            };
        }
        let got = std::fs::symlink_metadata(path);
        let kept = match &got {
            Ok(m) => Kept::Meta(Box::new(m.clone())),
            Err(e) => match e.raw_os_error() {
                Some(code) => Kept::Os(code),
                None => Kept::Other(e.kind(), e.to_string()),
            },
        };
        self.seen.borrow_mut().insert(path.to_owned(), kept);
        got
    }
}

impl PathResolver for Memo {
    fn resolve(&self, path: &str) -> Resolution {
        // A path one plain component below a directory a walk of this call already reached
        // starts from there (`kernel::resolve_below`): a key whose answer is a directory (`lstat`,
        // so not a link) was the resolved prefix of a walk, which holds no link and no `.`, `..`
        // or empty component.
        if let Some((dir, name)) = crate::bytes::rsplit_slash(path) {
            let plain = !matches!(name, "" | "." | "..");
            let walked_dir = plain
                && !dir.is_empty()
                && matches!(self.seen.borrow().get(dir), Some(Kept::Meta(m)) if m.is_dir());
            if walked_dir {
                return crate::kernel::resolve_below(dir, name, &|p| self.lstat(p));
            }
        }
        crate::kernel::resolve_with(path, &|p| self.lstat(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same answers as the kernel resolver, for links, `..`, missing and unresolvable paths,
    /// asked twice.
    #[test]
    fn answers_as_the_kernel_does() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/f"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("a/b"), dir.path().join("l")).unwrap();
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a/f"), dir.path().join("lf")).unwrap();
        std::os::unix::fs::symlink("../lf", dir.path().join("a/lf")).unwrap();
        let memo = Memo::default();
        // An error other than "not found" (kept by its number, rebuilt on the second ask).
        let long = format!("a/{}", "x".repeat(300));
        for _ in 0..2 {
            let p = format!("{d}/{long}");
            let got = format!("{:?}", memo.resolve(&p));
            // ENAMETOOLONG (glibc words it "File name too long", musl "Filename too long").
            assert!(got.contains("os error 36"), "{got}");
            assert_eq!(got, format!("{:?}", crate::kernel::resolve(&p)));
        }
        for _ in 0..2 {
            for p in [
                "a/f",
                "l/../f",
                "l/new/x",
                "loop",
                "a/f/x",
                "missing/y",
                ".",
                // Below directories walked before: a link, a link to a file, missing, a file.
                "l",
                "lf",
                "a/lf",
                "a/none",
                "a/b",
                "a/b/.",
                "a/b/..",
                "a/b/",
                "a/b/../../lf",
                "loop/x",
            ] {
                let p = format!("{d}/{p}");
                assert_eq!(
                    format!("{:?}", memo.resolve(&p)),
                    format!("{:?}", crate::kernel::resolve(&p)),
                    "{p}"
                );
            }
        }
    }
}

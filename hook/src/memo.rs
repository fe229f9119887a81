//! A `PathResolver` for one hook call that asks the kernel about each path at most once. The
//! catastrophic check, cmdgate's own paths and every word of the command walk the same prefixes
//! (`/home`, `/home/me`, the project …): about a hundred `lstat`s for `ls -la`, most of them
//! repeats. What it remembers is never older than the call itself, and the command runs after the
//! answer anyway; the daemon, which runs for days, uses `kernel::Kernel`, which remembers nothing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
use std::io;

use cmdgate_policy::decide::kernel::{PathResolver, Resolution};

/// One `lstat`'s answer, kept: the metadata, or the error's kind and text.
type Kept = Result<Metadata, (io::ErrorKind, String)>;

/// `lstat` results of one call, by path.
#[derive(Default)]
pub struct Memo {
    seen: RefCell<HashMap<String, Kept>>,
}

impl Memo {
    fn lstat(&self, path: &str) -> io::Result<Metadata> {
        if let Some(hit) = self.seen.borrow().get(path) {
            return hit
                .clone()
                .map_err(|(kind, what)| io::Error::new(kind, what));
        }
        let got = std::fs::symlink_metadata(path);
        let kept = match &got {
            Ok(m) => Ok(m.clone()),
            Err(e) => Err((e.kind(), e.to_string())),
        };
        self.seen.borrow_mut().insert(path.to_owned(), kept);
        got
    }
}

impl PathResolver for Memo {
    fn resolve(&self, path: &str) -> Resolution {
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
        let memo = Memo::default();
        for _ in 0..2 {
            for p in [
                "a/f",
                "l/../f",
                "l/new/x",
                "loop",
                "a/f/x",
                "missing/y",
                ".",
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

//! The `PathResolver` of one judgement: `kernel::resolve_with` asking the kernel about each path
//! at most once. cmdgate's own paths, the catastrophic check, every word of the command and the
//! repository walk of `git` resolve the same prefixes again and again (`/tmp` 39 times in one
//! routed `git push`, about 200 `statx` a decision); remembered, that is the few dozen distinct
//! paths.
//!
//! It lives for ONE judgement (`decide::judge` makes it and drops it with the step) and is the
//! layer the checks see: within a decision every check sees the same answer for the same path.
//! Below it, `Memo::over` asks the daemon's kept answers (`lookups.rs`), which outlive the
//! judgement but are dropped the moment the kernel reports a change they depend on, and are
//! brought up to date (`Lookups::drain`) before the judgement's first lookup: nothing it answers
//! is older than the last change finished before the decision started. An agent racing the
//! judgement from another process could already make the checks see any mix of the states it
//! moves a path through, and its command runs after the answer anyway. Errors are kept by their
//! OS error number and rebuilt as the same `io::Error`, so an unresolvable path stays
//! unresolvable (never an allow).
//!
//! A path one component below a directory some walk already reached resolves from there
//! (`kernel::resolve_below`): the same answer without asking about each prefix again.
//!
//! The hook has the same memo (`hook/src/memo.rs`, with an unkeyed hash: one process per call,
//! the agent can only slow itself). The daemon keeps std's keyed hasher: the keys are the agent's paths and
//! the table lives in a process every session shares.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
use std::io;

use cmdgate_policy::decide::kernel::{PathResolver, Resolution};

use super::lookups::Lookups;

/// One `lstat`'s answer, kept: the metadata, or the error (an OS error by its number; anything
/// else by its kind and text).
#[derive(Clone)]
pub(super) enum Kept {
    Meta(Metadata),
    Os(i32),
    Other(io::ErrorKind, String),
}

impl Kept {
    pub(super) fn of(got: &io::Result<Metadata>) -> Kept {
        match got {
            Ok(m) => Kept::Meta(m.clone()),
            Err(e) => match e.raw_os_error() {
                Some(code) => Kept::Os(code),
                None => Kept::Other(e.kind(), e.to_string()),
            },
        }
    }

    pub(super) fn answer(&self) -> io::Result<Metadata> {
        match self {
            Kept::Meta(m) => Ok(m.clone()),
            Kept::Os(code) => Err(io::Error::from_raw_os_error(*code)),
            Kept::Other(kind, what) => Err(io::Error::new(*kind, what.clone())),
        }
    }
}

/// `lstat` answers of one judgement, by path. Not `Sync`: a judgement runs on one thread.
pub(crate) struct Memo<'l> {
    seen: RefCell<HashMap<String, Kept>>,
    /// The daemon's kept answers, asked on a miss; `None`: the kernel, fresh.
    kept: Option<&'l Lookups>,
}

/// Distinct paths a routed decision usually asks about (about 50 for a `git push`): room made
/// once instead of growing the table, and rehashing every key, five times.
const USUAL_PATHS: usize = 64;

impl Default for Memo<'_> {
    /// A memo asking the kernel on every miss.
    fn default() -> Memo<'static> {
        Memo {
            seen: RefCell::new(HashMap::with_capacity(USUAL_PATHS)),
            kept: None,
        }
    }
}

impl<'l> Memo<'l> {
    /// A memo over the daemon's kept answers, brought up to date first: every change finished
    /// before this call is seen.
    pub(crate) fn over(kept: &'l Lookups) -> Memo<'l> {
        kept.drain();
        Memo {
            seen: RefCell::new(HashMap::with_capacity(USUAL_PATHS)),
            kept: Some(kept),
        }
    }

    fn lstat(&self, path: &str) -> io::Result<Metadata> {
        if let Some(hit) = self.seen.borrow().get(path) {
            return hit.answer();
        }
        let got = match self.kept {
            Some(kept) => kept.lstat(path),
            None => std::fs::symlink_metadata(path),
        };
        self.seen
            .borrow_mut()
            .insert(path.to_owned(), Kept::of(&got));
        got
    }

    /// Distinct paths asked about so far.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.borrow().len()
    }
}

impl PathResolver for Memo<'_> {
    fn resolve(&self, path: &str) -> Resolution {
        // A path one plain component below a directory a walk of this judgement already reached
        // starts from there (`kernel::resolve_below`, as the hook's memo does): every key is a
        // prefix a walk resolved (only `resolve` asks `lstat`), and one whose answer is a
        // directory (`lstat`, so not a link) holds no link and no `.`, `..` or empty component,
        // so the whole walk of `dir/name` would reach `dir` first. cmdgate's own files in the
        // config and data directories and each word in the project cost one lookup in the memo
        // instead of one per component.
        if let Some((dir, name)) = path.rsplit_once('/') {
            let plain = !matches!(name, "" | "." | "..");
            let walked_dir = plain
                && !dir.is_empty()
                && matches!(self.seen.borrow().get(dir), Some(Kept::Meta(m)) if m.is_dir());
            if walked_dir {
                return super::kernel::resolve_below(dir, name, &|p| self.lstat(p));
            }
        }
        super::kernel::resolve_with(path, &|p| self.lstat(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kernel;
    use cmdgate_policy::decide::kernel::Kind;
    use proptest::prelude::*;

    /// A resolution with a directory's link count left out. A directory's `st_nlink` counts its
    /// subdirectories, and the directories above the tree (`/tmp`, reached by `..` or
    /// `/proc/self/root/tmp`) gain and lose subdirectories while other tests run in parallel:
    /// the memo keeps the count of its one lookup, the kernel resolver reads it again, and the
    /// two may then differ without either being wrong. Only a regular file's count is judged
    /// (`Resolution::Exists::links`), and that stays compared.
    fn judged(r: Resolution) -> Resolution {
        match r {
            Resolution::Exists {
                real,
                kind: Kind::Dir,
                id,
                ..
            } => Resolution::Exists {
                real,
                kind: Kind::Dir,
                links: 0,
                id,
            },
            other => other,
        }
    }

    /// A tree of directories, files, a hard link and links of every kind (relative, absolute,
    /// through `..`, dangling, a loop, a link to a file used as a directory).
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("a/b/c")).unwrap();
        std::fs::write(p.join("a/f"), "x").unwrap();
        std::fs::write(p.join("a/b/g"), "x").unwrap();
        std::fs::hard_link(p.join("a/f"), p.join("a/h")).unwrap();
        let link = |t: &str, l: &str| std::os::unix::fs::symlink(t, p.join(l)).unwrap();
        link(&p.join("a/b").display().to_string(), "abs");
        link("a/b", "rel");
        link("../a/f", "a/b/up");
        link("rel/c", "chain");
        link("loop", "loop");
        link("nowhere", "dangling");
        link("a/f", "tofile");
        link("/proc/self/cwd", "magic");
        dir
    }

    /// Relative names inside the tree a judgement could ask about.
    const NAMES: &[&str] = &[
        "",
        ".",
        "a",
        "a/f",
        "a/h",
        "a/b",
        "a/b/c",
        "a/b/g",
        "a/b/up",
        "abs",
        "rel",
        "chain",
        "loop",
        "dangling",
        "tofile",
        "magic",
        "abs/..",
        "rel/../a",
        "chain/..",
        "a/b/up/x",
        "tofile/x",
        "loop/x",
        "dangling/x",
        "missing",
        "missing/y",
        "a/../rel/c",
        "abs/c/../g",
        "a/f/..",
        // Below directories walked before: a file, its hard link, a link, missing, and names
        // that are not one plain component.
        "a/none",
        "a/b/",
        "a/b/.",
        "a/b/..",
        "a/b/../../rel",
        "a/b/c/",
    ];

    /// Every answer the memo gives is the kernel resolver's: first ask, repeated asks, and asks
    /// whose prefixes were remembered by other paths; errors included (a name too long is not
    /// "not found").
    #[test]
    fn the_same_answers_as_the_kernel() {
        let dir = tree();
        let d = dir.path().display().to_string();
        let long = format!("{d}/a/{}", "x".repeat(300));
        let mut paths: Vec<String> = NAMES.iter().map(|n| format!("{d}/{n}")).collect();
        paths.push(long.clone());
        paths.push("/proc/self/root/tmp".into());
        paths.push("relative/path".into());
        let memo = Memo::default();
        for round in 0..2 {
            for p in &paths {
                assert_eq!(
                    judged(memo.resolve(p)),
                    judged(kernel::resolve(p)),
                    "{p}, round {round}"
                );
            }
        }
        assert!(
            format!("{:?}", memo.resolve(&long)).contains("File name too long"),
            "an error other than a missing path stays itself"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Paths made of the tree's names, `.`, `..`, missing and overlong names, asked in any order and
        /// any number of times: the memo answers each exactly as the kernel resolver does.
        #[test]
        fn any_order_of_asks_answers_as_the_kernel(
            asks in prop::collection::vec(
                prop::collection::vec(
                    prop::sample::select(vec![
                        "a", "b", "c", "f", "g", "h", "up", "abs", "rel", "chain", "loop",
                        "dangling", "tofile", "magic", "..", ".", "zz", "long",
                    ]),
                    0..6,
                ),
                1..40,
            ),
        ) {
            let dir = tree();
            let d = dir.path().display().to_string();
            let memo = Memo::default();
            for parts in &asks {
                // `long`: a name too long for the kernel (an error that is not "not found").
                let parts: Vec<String> = parts
                    .iter()
                    .map(|p| if *p == "long" { "x".repeat(256) } else { (*p).to_owned() })
                    .collect();
                let p = format!("{d}/{}", parts.join("/"));
                prop_assert_eq!(judged(memo.resolve(&p)), judged(kernel::resolve(&p)), "{}", p);
            }
        }
    }
}

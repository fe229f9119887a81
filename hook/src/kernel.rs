//! Paths as the kernel resolves them now, for the policy's `PathResolver`
//! (`cmdgate_policy::decide::kernel`): symbolic links in every component, the final one included,
//! `..` after a link taken from the link's target, hard links counted. The one implementation,
//! used by the hook and by the daemon (which includes this file by path), so both see the same.
//! std only (the hook's rule).

use std::borrow::Cow;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;

use cmdgate_policy::decide::kernel::{Kind, PathResolver, Resolution};
use cmdgate_policy::decide::paths::normalise;

/// Links followed before a path counts as a loop (the kernel's `MAXSYMLINKS`).
const MAX_HOPS: usize = 40;

/// The real file system, now.
pub struct Kernel;

impl PathResolver for Kernel {
    fn resolve(&self, path: &str) -> Resolution {
        resolve(path)
    }
}

/// Resolves an absolute path component by component.
pub fn resolve(path: &str) -> Resolution {
    resolve_with(path, &|p| std::fs::symlink_metadata(p))
}

/// [`resolve`], with `lstat` asking the kernel about one path (the hook remembers the answers of
/// one call, `hook/src/memo.rs`). Of an `lstat` answer the walk reads the file type, `st_nlink`,
/// `st_dev` and `st_ino`, nothing else: the daemon keeps answers across decisions and drops them
/// on the changes of exactly those (`daemon/src/engine/lookups.rs`); a field read here beyond
/// them must be watched there first.
pub fn resolve_with(
    path: &str,
    lstat: &dyn Fn(&str) -> std::io::Result<std::fs::Metadata>,
) -> Resolution {
    if !path.starts_with('/') {
        return Resolution::Unknown {
            why: format!("{path:?} is not absolute"),
        };
    }
    // The components still to walk, last first: borrowed from `path`, owned from link targets
    // (this runs for every component of every path, ~100 a call: no copy of the common case).
    let mut todo: Vec<Cow<'_, str>> = Vec::with_capacity(16);
    push_components(path, &mut todo);
    walk(String::with_capacity(path.len()), todo, lstat)
}

/// [`resolve_with`] of `dir/name`, for a `dir` an earlier walk with the same `lstat` reached as
/// its resolved prefix (absolute, not `/`, no link in any component, a directory) and a `name`
/// that is one component (not empty, `.` or `..`). The walk of `dir` gives `dir` back, link-free
/// component after component, so the walk of `dir/name` starts there: the same answer, without
/// asking about every prefix again (the hook resolves its own files and every word of a command
/// below a handful of directories).
pub fn resolve_below(
    dir: &str,
    name: &str,
    lstat: &dyn Fn(&str) -> std::io::Result<std::fs::Metadata>,
) -> Resolution {
    let mut cur = String::with_capacity(dir.len() + 1 + name.len());
    cur.push_str(dir);
    walk(cur, vec![Cow::Borrowed(name)], lstat)
}

/// Walks `todo` (components, last first) from the resolved prefix `cur` ("" is the root).
fn walk<'p>(
    mut cur: String,
    mut todo: Vec<Cow<'p, str>>,
    lstat: &dyn Fn(&str) -> std::io::Result<std::fs::Metadata>,
) -> Resolution {
    let unknown = |why: String| Resolution::Unknown { why };
    // `cur` is always real (no links in it). A candidate is this prefix with one more
    // component, built in place and cut back when it is a link.
    let mut hops = 0;
    while let Some(part) = todo.pop() {
        match &*part {
            "." => continue,
            ".." => {
                if let Some(i) = cur.rfind('/') {
                    cur.truncate(i);
                }
                continue;
            }
            _ => {}
        }
        let parent = cur.len();
        cur.push('/');
        cur.push_str(&part);
        let meta = match lstat(&cur) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let mut rest = cur;
                while let Some(p) = todo.pop() {
                    rest.push('/');
                    rest.push_str(&p);
                }
                return Resolution::Missing {
                    real: normalise(&rest),
                };
            }
            Err(e) => return unknown(format!("{cur}: {e}")),
        };
        if !meta.file_type().is_symlink() {
            if !meta.is_dir() && !todo.is_empty() {
                return unknown(format!("{cur} is not a directory"));
            }
            continue;
        }
        hops += 1;
        if hops > MAX_HOPS {
            return unknown(format!("more than {MAX_HOPS} symbolic links"));
        }
        if magic(&cur[..parent], &part) {
            return unknown(format!(
                "{cur} is a /proc link whose target depends on the process resolving it"
            ));
        }
        let target = match std::fs::read_link(&cur) {
            Ok(t) => t,
            Err(e) => return unknown(format!("{cur}: {e}")),
        };
        let Some(target) = target.to_str() else {
            return unknown(format!("{cur} points at a name that is not UTF-8"));
        };
        cur.truncate(parent);
        for p in target.split('/').filter(|s| !s.is_empty()).rev() {
            todo.push(Cow::Owned(p.to_owned()));
        }
        if target.starts_with('/') {
            cur.clear();
        }
    }
    let real = if cur.is_empty() { "/".to_owned() } else { cur };
    match lstat(&real) {
        Ok(m) => Resolution::Exists {
            kind: if m.is_dir() {
                Kind::Dir
            } else if m.is_file() {
                Kind::File
            } else {
                Kind::Other
            },
            links: m.nlink(),
            id: (m.dev(), m.ino()),
            real,
        },
        Err(e) => unknown(format!("{real}: {e}")),
    }
}

/// Pushes the non-empty components of `path`, last first (what a split on `/`, reversed, gives;
/// one pass over the bytes: this runs for every path of every call).
fn push_components<'p>(path: &'p str, todo: &mut Vec<Cow<'p, str>>) {
    let mut end = path.len();
    for (i, b) in path.bytes().enumerate().rev() {
        if b == b'/' {
            if i + 1 < end {
                todo.push(Cow::Borrowed(&path[i + 1..end]));
            }
            end = i;
        }
    }
    if end > 0 {
        todo.push(Cow::Borrowed(&path[..end]));
    }
}

/// `/proc/<pid>/cwd`, `exe`, `fd/*`, `map_files/*`: "links" the kernel resolves per process, so
/// what the hook or the daemon sees is not what the agent's process would (`/proc/<pid>/root` is
/// followed: it reads as `/` for every process outside a chroot).
fn magic(parent: &str, name: &str) -> bool {
    let Some(rest) = parent.strip_prefix("/proc/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [_pid] | [_pid, "task", _] => matches!(name, "cwd" | "exe"),
        [_pid, "fd" | "map_files"] | [_pid, "task", _, "fd" | "map_files"] => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_dotdot_missing_and_hard_links() {
        let dir = std::env::temp_dir().join(format!("cmdgate-kernel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/f"), "x").unwrap();
        std::os::unix::fs::symlink(dir.join("a/b"), dir.join("l")).unwrap();
        std::os::unix::fs::symlink("l", dir.join("l2")).unwrap();
        std::fs::hard_link(dir.join("a/f"), dir.join("h")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        let d = dir.display().to_string();
        let real = |p: &str| match resolve(&format!("{d}/{p}")) {
            Resolution::Exists { real, .. } | Resolution::Missing { real } => real,
            Resolution::Unknown { why } => format!("unknown: {why}"),
        };
        assert_eq!(real("l2/../f"), format!("{d}/a/f"), "`..` after a link");
        assert_eq!(real("l/new/x"), format!("{d}/a/b/new/x"));
        assert!(real("loop").starts_with("unknown"));
        assert!(real("a/f/x").starts_with("unknown"));
        assert!(matches!(
            resolve(&format!("{d}/h")),
            Resolution::Exists {
                links: 2,
                kind: Kind::File,
                ..
            }
        ));
        assert_eq!(
            real_of(&format!("/proc/self/root{d}/l")),
            format!("{d}/a/b")
        );
        assert!(matches!(
            resolve("/proc/self/cwd/x"),
            Resolution::Unknown { .. }
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn components_as_the_split_gives_them() {
        for p in ["/", "//a//b/", "/a/b/c", "a/b", "", "/é/x", "a", "/..//./x"] {
            let mut got = Vec::new();
            push_components(p, &mut got);
            let want: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).rev().collect();
            assert_eq!(got, want, "{p}");
        }
    }

    fn real_of(p: &str) -> String {
        match resolve(p) {
            Resolution::Exists { real, .. } | Resolution::Missing { real } => real,
            Resolution::Unknown { why } => why,
        }
    }
}

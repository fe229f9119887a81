//! Paths as the kernel sees them: symbolic links in every component (the final one included) and
//! hard links, as the caller resolved them against the real file system at decision time.
//!
//! The policy does no IO, so the caller passes a [`PathResolver`] in, as it passes a
//! [`DirListing`](crate::shell::read::DirListing): the hook and the daemon both use
//! `hook/src/kernel.rs`. A decision about a path holds for its spelling *and* for where it resolves;
//! a path that cannot be resolved ([`Resolution::Unknown`]) is never allowed on its spelling; and a
//! regular file with more than one hard link may be any of its other names, so nothing is allowed
//! on the strength of the name it was given.

use super::paths::{self, Base};
use super::Tool;

/// What a path is, as the kernel resolves it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It exists; `real` is absolute with every link followed.
    Exists {
        real: String,
        kind: Kind,
        /// Hard links to it (`st_nlink`); more than one for a regular file means other names.
        links: u64,
        /// `(st_dev, st_ino)`: finds a hard link to one of cmdgate's own files under another name.
        id: (u64, u64),
    },
    /// It does not exist: the longest existing prefix resolved, the rest appended (where a write
    /// creates it).
    Missing { real: String },
    /// It cannot be resolved now (permission denied, a link loop, a magic `/proc` link whose target
    /// depends on the process): never an allow.
    Unknown { why: String },
}

/// The kind of an existing path (after links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    /// A device, socket or fifo.
    Other,
}

/// Resolves absolute paths (`..` is resolved by the kernel, after the link before it).
pub trait PathResolver {
    fn resolve(&self, path: &str) -> Resolution;
}

impl<F: Fn(&str) -> Resolution> PathResolver for F {
    fn resolve(&self, path: &str) -> Resolution {
        self(path)
    }
}

/// The resolver of a world where nothing exists: every path is what it says. Only for callers that
/// judge text with no file system behind it (a command explained in the abstract, unit tests).
pub struct Spelling;

impl PathResolver for Spelling {
    fn resolve(&self, path: &str) -> Resolution {
        Resolution::Missing {
            real: paths::normalise(path),
        }
    }
}

/// A path as spelled (lexically resolved) and as the kernel resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `~`, relative and `..` resolved lexically.
    pub spelled: String,
    pub resolution: Resolution,
}

impl Seen {
    /// Resolves `text` (as a tool gives it) against `base`.
    pub fn of(text: &str, base: Base<'_>, kernel: &dyn PathResolver) -> Seen {
        Seen::absolute(&join(text, base), kernel)
    }

    /// Resolves an absolute, possibly unnormalised path.
    pub fn absolute(joined: &str, kernel: &dyn PathResolver) -> Seen {
        Seen {
            spelled: paths::normalise(joined),
            resolution: kernel.resolve(joined),
        }
    }

    /// Where it resolves, when known.
    pub fn real(&self) -> Option<&str> {
        match &self.resolution {
            Resolution::Exists { real, .. } | Resolution::Missing { real } => Some(real),
            Resolution::Unknown { .. } => None,
        }
    }

    /// Every name a decision must hold for: the spelling and, when different, the target.
    pub fn names(&self) -> Vec<&str> {
        let mut v = vec![self.spelled.as_str()];
        if let Some(r) = self.real().filter(|r| *r != self.spelled) {
            v.push(r);
        }
        v
    }

    /// Why the path's names are not all it may be: unresolvable, or a regular file with other
    /// hard links. `None`: the names are the whole truth.
    pub fn doubt(&self) -> Option<String> {
        match &self.resolution {
            Resolution::Unknown { why } => {
                Some(format!("{} cannot be resolved now ({why})", self.spelled))
            }
            Resolution::Exists {
                kind: Kind::File,
                links,
                ..
            } if *links > 1 => Some(format!(
                "{} has {links} hard links, so it may be any of its other names",
                self.spelled
            )),
            Resolution::Exists { .. } | Resolution::Missing { .. } => None,
        }
    }

    /// The target, when it differs from the spelling: for reasons (`notes.txt -> ~/.bashrc`).
    pub fn shown(&self) -> String {
        match self.real().filter(|r| *r != self.spelled) {
            Some(r) => format!("{} (a link to {r})", self.spelled),
            None => self.spelled.clone(),
        }
    }
}

/// `text` made absolute against `base` (`~`, `~/…` and relative paths), without lexical
/// normalisation: `link/..` is the link's parent, which only the kernel knows.
pub fn join(text: &str, base: Base<'_>) -> String {
    // Two pieces and a `/`, put together by hand: `format!` costs several times more, and this
    // runs for every word of every command on the hook's fast path.
    let joined = |dir: &str, rest: &str| {
        let mut out = String::with_capacity(dir.len() + 1 + rest.len());
        out.push_str(dir);
        out.push('/');
        out.push_str(rest);
        out
    };
    if text == "~" {
        base.home.to_owned()
    } else if let Some(rest) = text.strip_prefix("~/") {
        joined(base.home, rest)
    } else if text.starts_with('/') {
        text.to_owned()
    } else {
        joined(base.cwd, text)
    }
}

/// cmdgate's own paths as one set: each as configured and as it resolves, plus the identity of each
/// existing own *file* (so a hard link to the store or the signing key is recognised).
#[derive(Debug, Clone, Default)]
pub struct OwnPaths {
    names: Vec<String>,
    ids: Vec<(u64, u64)>,
}

impl OwnPaths {
    /// `own` are directories or files; `project_root` is excluded (an own path that holds the
    /// project, such as a config dir set to a parent of the workspace, protects nothing).
    pub fn resolve(own: &[String], project_root: &str, kernel: &dyn PathResolver) -> OwnPaths {
        let mut names = Vec::new();
        let mut ids = Vec::new();
        for p in own {
            let seen = Seen::absolute(p, kernel);
            for n in seen.names() {
                if !paths::is_within(project_root, n) && n != "/" {
                    names.push(n.to_owned());
                }
            }
            if let Resolution::Exists {
                kind: Kind::File,
                id,
                ..
            } = seen.resolution
            {
                ids.push(id);
            }
        }
        names.sort();
        names.dedup();
        OwnPaths { names, ids }
    }

    /// The own path `seen` names or is (through a link or a hard link), if any.
    pub fn hit(&self, seen: &Seen) -> Option<String> {
        for n in seen.names() {
            if let Some(own) = self.names.iter().find(|own| paths::is_within(n, own)) {
                return Some(own.clone());
            }
        }
        match &seen.resolution {
            Resolution::Exists { id, real, .. } if self.ids.contains(id) => Some(real.clone()),
            _ => None,
        }
    }

    /// An own path strictly below `dir` (a recursive read of `dir` reads it), if any.
    pub fn below(&self, dir: &str) -> Option<String> {
        self.names
            .iter()
            .find(|own| paths::is_within(own, dir))
            .cloned()
    }
}

/// Why a tool call may not be allowed without the daemon for what its path is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathDoubt {
    /// It reaches one of cmdgate's own files (or, for Grep, a tree holding one): refused for
    /// every tool, under the escape hatch too (the daemon's built-in `cmdgate-own-path`).
    Own(String),
    /// A read tool's path is not only what it is called (unresolvable, another name of a
    /// hard-linked file): the daemon decides.
    Other(String),
}

/// The hook's question before a local answer for Claude Code's tools other than Bash: `Read`,
/// `Glob`, `Grep`, `LS` and the Write family (own files only: the daemon decides every write).
/// The daemon's tool policy decides the same cases.
pub fn tool_path_doubt(
    tool: &Tool,
    base: Base<'_>,
    own: &OwnPaths,
    kernel: &dyn PathResolver,
) -> Option<PathDoubt> {
    let (name, path, read) = match tool {
        Tool::Read { tool, path } => (tool, path.as_str(), true),
        Tool::Search { tool, path, .. } => (tool, path.as_deref().unwrap_or("."), true),
        Tool::Write { tool, path } => (tool, path.as_str(), false),
        Tool::Bash { .. } | Tool::Web { .. } | Tool::Internal { .. } | Tool::Other { .. } => {
            return None
        }
    };
    let seen = Seen::of(path, base, kernel);
    if let Some(o) = own.hit(&seen) {
        return Some(PathDoubt::Own(format!(
            "`{name}` of {} reaches cmdgate's own {o}",
            seen.shown()
        )));
    }
    if name == "Grep" {
        if let Some(o) = seen.names().iter().find_map(|n| own.below(n)) {
            return Some(PathDoubt::Own(format!(
                "`{name}` in {} searches cmdgate's own {o}",
                seen.shown()
            )));
        }
    }
    if !read {
        return None;
    }
    seen.doubt()
        .map(|d| PathDoubt::Other(format!("`{name}`: {d}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Base<'static> = Base {
        home: "/home/a",
        cwd: "/home/a/p",
    };

    fn world(path: &str) -> Resolution {
        match path {
            "/home/a/p/notes.txt" => Resolution::Exists {
                real: "/home/a/.bashrc".into(),
                kind: Kind::File,
                links: 1,
                id: (1, 2),
            },
            "/home/a/p/hl" => Resolution::Exists {
                real: "/home/a/p/hl".into(),
                kind: Kind::File,
                links: 2,
                id: (1, 9),
            },
            "/home/a/.config/cmdgate/dev-signing-key" => Resolution::Exists {
                real: "/home/a/.config/cmdgate/dev-signing-key".into(),
                kind: Kind::File,
                links: 2,
                id: (1, 9),
            },
            "/proc/self/cwd/x" => Resolution::Unknown {
                why: "a magic link".into(),
            },
            p => Resolution::Missing {
                real: paths::normalise(p),
            },
        }
    }

    #[test]
    fn names_doubts_and_own_paths() {
        let link = Seen::of("notes.txt", BASE, &world);
        assert_eq!(link.names(), ["/home/a/p/notes.txt", "/home/a/.bashrc"]);
        assert_eq!(link.doubt(), None);
        assert!(link.shown().contains("a link to /home/a/.bashrc"));
        let hl = Seen::of("hl", BASE, &world);
        assert!(hl.doubt().unwrap().contains("2 hard links"));
        assert!(Seen::of("/proc/self/cwd/x", BASE, &world).doubt().is_some());
        let own = OwnPaths::resolve(
            &[
                "/home/a/.config/cmdgate".into(),
                "/home/a/.config/cmdgate/dev-signing-key".into(),
                "/home".into(),
            ],
            "/home/a/p",
            &world,
        );
        // The hard link is the signing key under another name; `/home` holds the project.
        assert!(own.hit(&hl).is_some());
        assert!(own.hit(&link).is_none());
        assert!(own
            .hit(&Seen::of(
                "~/.config/cmdgate/../cmdgate/trusted-keys",
                BASE,
                &world
            ))
            .is_some());
        assert_eq!(join("~/x/../y", BASE), "/home/a/x/../y");
    }
}
